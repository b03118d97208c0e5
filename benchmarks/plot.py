"""Draw the docs' performance figure from a ``make bench`` report.

    python benchmarks/plot.py                                   # results/latest.json
    python benchmarks/plot.py REPORT.json --out docs/_static/performance.png

One panel per workload of the report: W1 to W3 as steps/s, bars per case (TorchRL's pools
beside aioenv's and gymnasium's rows); the training scripts on real envs (W11 Atari Pong,
W12 MuJoCo HalfCheetah, W13 pipelined against lockstep) as each row's ratio to gymnasium's
SyncVectorEnv in the same case, with the computed machine limit drawn as a dashed line over
each case. The command, commit and machine that produced the report are written on the
figure and printed, so the figure never travels without them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_REPORT = HERE / "results" / "latest.json"
DEFAULT_OUT = HERE.parent / "docs" / "_static" / "performance.png"
#: The rows a reader compares: aioenv's main configurations, gymnasium's two vector envs
#: and TorchRL's two pools.
SHOWN = (
    "aioenv sync / state",
    "aioenv thread / state",
    "aioenv process / state",
    "aioenv process x4 / state",
    "aioenv process x8 / batch",
    "gym SyncVectorEnv",
    "gym AsyncVectorEnv",
    "TorchRL ParallelEnv",
    "TorchRL AsyncEnvPool (processes)",
)
#: Workloads drawn as steps/s (W4 and W5 measure per-step costs, not throughput).
DRAWN = ("W1", "W2", "W3")
#: Workloads drawn as ratios to SyncVectorEnv (their targets are stated against it), every
#: row of the report but the limit, which is a line.
RATIO_DRAWN = ("W11", "W12", "W13")
SYNC = "gym SyncVectorEnv"
ASYNC = "gym AsyncVectorEnv"
LIMIT = "machine limit (computed)"  # lockstep.LIMIT


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

    drawn = [key for key in (*DRAWN, *RATIO_DRAWN) if key in report["workloads"]]
    figure, axes = plt.subplots(
        len(drawn), 1, figsize=(10, 3.6 * len(drawn)), squeeze=False, layout="constrained"
    )
    # One color per row across the ratio panels, in order of first appearance.
    ratio_labels = [
        row["label"]
        for key in drawn
        if key in RATIO_DRAWN
        for row in report["workloads"][key]["rows"]
        if row["label"] not in (SYNC, ASYNC, LIMIT)
    ]
    # gymnasium keeps grey and red, as in run.py's chart; the others take tab20's other hues.
    palette = plt.get_cmap("tab20")
    free = [palette(index) for index in (0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 16, 17, 18, 19)]
    colors = {SYNC: "tab:gray", ASYNC: "tab:red"} | {
        label: free[index % len(free)] for index, label in enumerate(dict.fromkeys(ratio_labels))
    }
    for axis, key in zip(axes[:, 0], drawn, strict=True):
        workload = report["workloads"][key]
        if key in RATIO_DRAWN:
            _draw_ratios(axis, key, workload, colors)
            continue
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


def _draw_ratios(axis: Any, key: str, workload: dict[str, Any], colors: dict[str, Any]) -> None:
    """Each row's median over SyncVectorEnv's in its case; the machine limit as a line."""
    rows = [row for row in workload["rows"] if row.get("median")]
    sync = {row["case"]: row["median"] for row in rows if row["label"] == SYNC}
    rows = [row for row in rows if row["case"] in sync]
    cases = list(dict.fromkeys(row["case"] for row in rows))
    labels = [label for label in dict.fromkeys(row["label"] for row in rows) if label != LIMIT]
    width = 0.8 / max(len(labels), 1)
    for index, label in enumerate(labels):
        found = {
            row["case"]: row["median"] / sync[row["case"]] for row in rows if row["label"] == label
        }
        positions = [i for i, case in enumerate(cases) if case in found]
        axis.bar(
            [p + (index - (len(labels) - 1) / 2) * width for p in positions],
            [found[cases[p]] for p in positions],
            width,
            label=label,
            color=colors[label],
        )
    limits = {
        row["case"]: row["median"] / sync[row["case"]] for row in rows if row["label"] == LIMIT
    }
    for number, (position, case) in enumerate((p, c) for p, c in enumerate(cases) if c in limits):
        axis.hlines(
            limits[case],
            position - 0.45,
            position + 0.45,
            colors="black",
            linestyles="dashed",
            label=LIMIT if number == 0 else None,
        )
    axis.axhline(1.0, color="tab:gray", linewidth=0.8)
    axis.set_xticks(range(len(cases)), cases)
    axis.set_ylabel("steps/s / SyncVectorEnv's")
    axis.set_title(f"{key}: {workload['title']}")
    # Below the panel: above the bars it would hide the limit line.
    axis.legend(fontsize="x-small", ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    arguments = parser.parse_args()
    print(draw(json.loads(arguments.report.read_text()), arguments.out))


if __name__ == "__main__":
    main()
