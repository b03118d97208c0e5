"""Draw the docs' performance figure from a ``make bench`` report.

    python benchmarks/plot.py                                   # results/latest.json
    python benchmarks/plot.py REPORT.json --out docs/_static/performance.png

One panel per workload of the report: CartPole-v1 (W1) as steps/s against the number of
envs, the others as bars per case. The command, commit and machine that produced the
report are written on the figure and printed, so the figure never travels without them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_REPORT = HERE / "results" / "latest.json"
DEFAULT_OUT = HERE.parent / "docs" / "_static" / "performance.png"
#: The rows a reader compares: aioenv's main configurations and gymnasium's two vector envs.
SHOWN = (
    "aioenv sync / state",
    "aioenv thread / state",
    "aioenv process / state",
    "aioenv process x4 / state",
    "aioenv process x8 / batch",
    "gym SyncVectorEnv",
    "gym AsyncVectorEnv",
)
#: Workloads drawn as steps/s (W4 and W5 measure per-step costs, not throughput).
DRAWN = ("W1", "W2", "W3")


def provenance(meta: dict[str, Any]) -> str:
    """Which command, commit and machine produced a report, in one line."""
    command = " ".join(["python", *meta.get("command", ["benchmarks/run.py"])])
    commit = meta.get("git", {}).get("commit", "unknown")
    system, *_, arch = meta.get("platform", "?").split("-with")[0].split("-")
    machine = (
        f"a {meta.get('cpu_count', '?')}-core {arch} machine ({meta.get('cpu_model', 'CPU')}, "
        f"{system}, Python {meta.get('python', '?')})"
    )
    return f"{command} at commit {commit} on {machine}"


def draw(report: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [(key, report["workloads"][key]) for key in DRAWN if key in report["workloads"]]
    figure, axes = plt.subplots(
        len(workloads), 1, figsize=(10, 3.6 * len(workloads)), squeeze=False, layout="constrained"
    )
    for axis, (key, workload) in zip(axes[:, 0], workloads, strict=True):
        rows = [row for row in workload["rows"] if row["label"] in SHOWN and row.get("median")]
        cases = list(dict.fromkeys(row["case"] for row in rows))
        labels = [label for label in SHOWN if any(row["label"] == label for row in rows)]
        width = 0.8 / max(len(labels), 1)
        for index, label in enumerate(labels):
            found = {row["case"]: row["median"] for row in rows if row["label"] == label}
            positions = [i for i, case in enumerate(cases) if case in found]
            axis.bar(
                [p + (index - (len(labels) - 1) / 2) * width for p in positions],
                [found[cases[p]] for p in positions],
                width,
                label=label,
                color=f"C{SHOWN.index(label)}",  # one color per row in every panel
            )
        axis.set_xticks(range(len(cases)), cases)
        axis.set_ylabel("env steps/s (median)")
        axis.set_title(f"{key}: {workload['title']}")
        axis.legend(fontsize="small", ncols=2)
    caption = provenance(report["meta"])
    figure.suptitle(caption, fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)
    plt.close(figure)
    return f"{out}: {caption}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    arguments = parser.parse_args()
    print(draw(json.loads(arguments.report.read_text()), arguments.out))


if __name__ == "__main__":
    main()
