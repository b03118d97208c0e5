"""Stands in for OpenCV in an env process: records the thread counts it is given."""

calls: list[tuple[str, int]] = []


def setNumThreads(threads: int) -> None:  # OpenCV's own name
    calls.append(("setNumThreads", threads))
