"""Hosts on one machine: network namespaces, each linked to this (the root) namespace by a
veth pair, for tests of what crosses a network (Ray nodes, env servers) and of a host
that goes away (its link set down, its processes killed).

Making a namespace needs root (``CAP_SYS_ADMIN``) and ``ip`` (iproute2):
:func:`why_no_hosts` says why it cannot be done here, for the tests to skip saying so. A
host's processes run under ``ip netns exec``; leaving :func:`hosts` kills whatever still
runs in its namespaces, then deletes them (their links with them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

from support import process_running, wait_until


def _ip(*argv: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    done = subprocess.run([*prefix, "ip", *argv], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def why_no_hosts() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces with"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    name = f"aioenv-probe-{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as error:
        return f"`ip netns add` failed: {error.stderr.strip()}"
    _ip("netns", "delete", name)
    return None


@dataclasses.dataclass
class Host:
    """A network namespace reached from the root namespace through its own link."""

    #: The namespace's name.
    namespace: str
    #: The host's address on its link.
    address: str
    #: The root namespace's address on the same link: how the host reaches this side.
    gateway: str
    #: The root side's end of the link (what :meth:`cut` sets down).
    link: str

    def start(self, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Run ``argv`` on this host, in a session of its own."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, *argv], start_new_session=True, **popen
        )

    def cut(self) -> None:
        """Set the link down: what either side sends is lost, and neither is told."""
        _ip("link", "set", self.link, "down")

    def pids(self) -> set[int]:
        """The processes that run in this host's namespace."""
        listed = subprocess.run(
            ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, timeout=30
        )
        return {int(pid) for pid in listed.stdout.split()}

    def kill_all(self) -> None:
        """SIGKILL every process of this host, and wait until none runs."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not any(process_running(pid) for pid in self.pids()), 30), (
            f"processes of {self.namespace} outlived SIGKILL: {self.pids()}"
        )


@contextlib.contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    """``count`` hosts, each a namespace linked to this one (host i: 10.X.i.2, this side
    10.X.i.1, X from this process's id so that two runs on one machine do not collide).
    On the way out every process left on them is killed and the namespaces deleted."""
    tag = f"{os.getpid() % 100_000}{chr(ord('a') + next(_made) % 26)}"
    subnet = 100 + os.getpid() % 100
    made: list[Host] = []
    try:
        for index in range(1, count + 1):
            host = Host(
                namespace=f"aioenv-{tag}-h{index}",
                address=f"10.{subnet}.{index}.2",
                gateway=f"10.{subnet}.{index}.1",
                link=f"ae{tag}h{index}",
            )
            _ip("netns", "add", host.namespace)
            made.append(host)
            _ip(
                "link",
                "add",
                host.link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.namespace,
            )
            _ip("addr", "add", f"{host.gateway}/24", "dev", host.link)
            _ip("link", "set", host.link, "up")
            _ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=host.namespace)
            _ip("link", "set", "eth0", "up", namespace=host.namespace)
            _ip("link", "set", "lo", "up", namespace=host.namespace)
        yield made
    finally:
        for host in made:
            host.kill_all()
            # Deleting one end of the link deletes both. The namespace's own end would go
            # with the namespace only once nothing in the kernel holds it (a socket of a
            # killed process still sending over a cut link keeps it for minutes).
            if _link_exists(host.link):
                _ip("link", "delete", host.link)
            _ip("netns", "delete", host.namespace)


_made = itertools.count()  # each call's names differ, whatever the kernel still holds
