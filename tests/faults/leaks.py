"""What this process holds open: its file descriptors, and among them aioenv's shared
memory, which is anonymous memory files (``memfd``), never files in ``/dev/shm``."""

from __future__ import annotations

import os

#: How ``/proc/self/fd`` names a memory file of aioenv's (``os.memfd_create``'s name).
MEMORY_FILE = "/memfd:aioenv"


def open_fds() -> dict[int, str]:
    """This process's open file descriptors and what each is."""
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return links


def memory_files(fds: dict[int, str]) -> list[str]:
    """Which of ``fds`` are aioenv's memory files."""
    return [link for link in fds.values() if link.startswith(MEMORY_FILE)]


def new_fds(before: dict[int, str], after: dict[int, str]) -> list[str]:
    """What ``after`` holds open that ``before`` did not (a descriptor number reused for
    something else counts as new)."""
    return sorted(link for fd, link in after.items() if before.get(fd) != link)
