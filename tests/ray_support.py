"""The Ray tests' shared local Ray instance, and what they ask of Ray's state.

Ray is started once per test session (``ray.init`` takes seconds and its daemons hundreds of
MiB) and shared by every test that needs it; a test that needs a cluster of its own stops
it first (:func:`stop`), and the next test that needs it starts it again."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from support import SESSION_HELPERS, direct_children, wait_until

#: Small and quiet: two CPUs (the machine's), a small object store, no dashboard, no usage
#: reporting, no token authentication (a throwaway cluster on this machine), and always a
#: new instance: never one that another program started on this machine with `ray start`.
LOCAL_OPTIONS: dict[str, Any] = {
    "address": "local",
    "num_cpus": 2,
    "object_store_memory": 100 * 1024**2,
    "include_dashboard": False,
    "log_to_driver": False,
}
QUIET_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def quiet() -> None:
    os.environ.update(QUIET_ENVIRONMENT)


def start() -> None:
    """Start the shared local instance unless Ray is up; its daemons become session
    helpers, which the leak check leaves alone."""
    import ray

    if ray.is_initialized():
        return
    quiet()
    before = direct_children()
    ray.init(**LOCAL_OPTIONS)
    SESSION_HELPERS.update(direct_children() - before)


def stop() -> None:
    """Shut Ray down and wait for the shared instance's daemons to exit. A daemon that
    exited without being waited for (Ray 2.50's shutdown leaves one a zombie: it never
    leaves the process table by itself) is reaped here."""
    import ray

    ray.shutdown()
    helpers = set(SESSION_HELPERS)

    def gone() -> bool:
        for pid in _all_children():
            if -pid in helpers:  # a zombie of ours
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(-pid, os.WNOHANG)
        return not (helpers & {abs(pid) for pid in _all_children()})

    assert wait_until(gone, timeout=60), f"Ray's daemons outlived ray.shutdown(): {helpers}"
    SESSION_HELPERS.difference_update(helpers)


def _all_children() -> set[int]:
    from support import children_of

    return set(children_of(os.getpid()))


def live_actors() -> list[dict[str, Any]]:
    """Every actor of this job not dead yet (pending, alive or restarting). Read from the
    GCS directly: ``ray.util.state`` would need the dashboard and ``ray[default]``."""
    import ray

    actors = ray._private.state.actors().values()
    return [actor for actor in actors if actor["State"] != "DEAD"]


def actor_state(actor_id: str) -> str:
    import ray

    return str(ray._private.state.actors(actor_id=actor_id)["State"])


def on_direct_connections(pool: Any) -> bool:
    """Every Ray worker of ``pool`` that asked for a direct connection to its actor has it
    open (seen from its host: no public surface says which way a message goes). A test
    that says which way its steps go waits for this: until the connection opens, the
    messages go as actor calls."""
    return all(worker._host._direct is None or worker._host._direct.open for worker in pool.workers)
