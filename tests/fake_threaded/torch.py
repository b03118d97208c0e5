"""Stands in for torch in an env process: records the thread counts it is given."""

calls: list[tuple[str, int]] = []


def set_num_threads(threads: int) -> None:
    calls.append(("set_num_threads", threads))


def set_num_interop_threads(threads: int) -> None:
    calls.append(("set_num_interop_threads", threads))
