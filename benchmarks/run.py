"""Benchmarks: aioenv against gymnasium's vector envs, in the same run.

    python benchmarks/run.py              # full: every workload, 3 repetitions (minutes)
    python benchmarks/run.py --quick      # smaller cases, shorter windows (under a minute)
    python benchmarks/run.py --quick --only W1,W3
    python benchmarks/run.py --only W11          # needs the bench extra (ale-py, mujoco)

Workloads: W1 CartPole-v1, W2 stragglers (lognormal step time), W3 large observations,
W4 round-trip floors, W5 dispatch scaling with thread workers, W6 a synchronous training
script over vector envs (a numpy MLP between lockstep steps), W7 coroutine envs (async
workers) against thread workers when every step waits 10 ms, W8 5 ms steps on Ray actors
against process workers, W9 a policy run inside the workers (pool.rollout) against in the
parent, W10 collect() against a hand-written get_batch loop, W11 Atari Pong and W12 MuJoCo
HalfCheetah in a lockstep training script (with EnvPool where it is installed and the
machine's computed limit), W13 a pipelined send/recv loop against lockstep ones (--quick
leaves W11 to W13 out unless --only names them), W14 10,000 coroutine envs whose steps
await 1 s on one loop (quick: 2,000 awaiting 0.2 s), in windows of their own. Each figure
is env steps per second (one env transition = one step) over a fixed wall-clock window
after a warm-up; tables show the median and min-max over interleaved repetitions. Results go to
benchmarks/results/latest.json and, if matplotlib is installed, latest.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Literal

from lockstep import LIMIT
from machine import CpuAccount, git_state, host_info, idle_probe, load_average, run_lock
from runners import Timing
from workloads import (
    CONFIGS,
    QUICK_DEFAULT,
    REAL_N,
    REFERENCE,
    REFERENCE_SYNC,
    WORKLOADS,
    Config,
    Row,
    Workload,
    WorkloadResult,
    build_workloads,
    measurements_per_rep,
    run_workload,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OVERHEAD_S = 0.15  # per measurement, beyond warm-up and window: build, first reset, close
BUSY_MARK = "*"
OVERHEAD_WORKLOADS = ("W5", "W8")  # fixed step time: the overhead per step is meaningful
#: Training-script workloads: their targets are stated against SyncVectorEnv.
SYNC_RATIO_WORKLOADS = ("W6", "W11", "W12", "W13")


@dataclasses.dataclass(frozen=True)
class Settings:
    scale: Literal["full", "quick"]
    reps: int
    timing: Timing
    busy_threshold: float
    probe_s: float
    real_n: int = REAL_N  # W11 and W12's envs per vector env
    cases: tuple[str, ...] = ()  # only the cases of these labels (all when empty)


DEFAULTS: dict[str, Settings] = {
    "full": Settings("full", 3, Timing(warmup=0.25, budget=1.0), 0.25, 1.0),
    "quick": Settings("quick", 2, Timing(warmup=0.05, budget=0.15), 0.25, 0.3),
}


def _window(timing: Timing) -> float:
    return timing.warmup + timing.budget


def _overhead(workload: Workload) -> float:
    return workload.overhead_s or OVERHEAD_S


# Summaries ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Summary:
    median: float
    low: float
    high: float
    busy: int  # repetitions taken while the machine was busy
    reps: int


def summarize(row: Row, threshold: float) -> Summary | None:
    if not row.samples:
        return None
    rates = [sample.rate for sample in row.samples]
    busy = sum(sample.busy(threshold) for sample in row.samples)
    return Summary(statistics.median(rates), min(rates), max(rates), busy, len(rates))


def _median(result: WorkloadResult, case: str, label: str, threshold: float) -> float | None:
    """The median of row ``label`` in ``case``, if it has samples."""
    row = next((r for r in result.rows if r.case == case and r.label == label), None)
    summary = summarize(row, threshold) if row is not None else None
    return summary.median if summary is not None else None


def limit_detail(row: Row) -> dict[str, float]:
    """The machine limit's inputs, medians over its repetitions (see lockstep.py)."""
    details = [sample.detail for sample in row.samples if sample.detail]
    return {key: statistics.median(detail[key] for detail in details) for key in details[0]}


def ideal_rate(result: WorkloadResult, n: int) -> float | None:
    """Steps/s if no env ever waited for another: N / mean step time."""
    if not result.step_times:
        return None
    return n / statistics.median(result.step_times)


def row_figures(result: WorkloadResult, row: Row, threshold: float) -> dict[str, Any]:
    """Everything reported about one row, for the table and the JSON alike."""
    summary = summarize(row, threshold)
    figures: dict[str, Any] = {
        "label": row.label,
        "kind": row.kind,
        "api": row.api,
        "options": row.options,
        "skipped": row.skipped,
        "errors": row.errors,
        "samples": [sample.as_dict(threshold) for sample in row.samples],
    }
    if summary is None:
        return figures
    figures.update(
        median=summary.median,
        min=summary.low,
        max=summary.high,
        busy_reps=summary.busy,
        reps=summary.reps,
        us_per_step=1e6 / summary.median if summary.median else None,
    )
    for key, label in (
        ("ratio_to_async", REFERENCE),
        ("ratio_to_sync", REFERENCE_SYNC),
        ("ratio_to_limit", LIMIT),
    ):
        reference = _median(result, row.case, label, threshold)
        if reference:
            figures[key] = summary.median / reference
    if row.kind == "limit":
        figures["limit_detail"] = limit_detail(row)
    ideal = ideal_rate(result, row.n)
    if ideal is not None and result.step_times:
        step_time = statistics.median(result.step_times)
        figures["pct_ideal"] = 100 * summary.median / ideal
        # Wall time per step beyond the ideal, and the extra latency each env sees per step.
        figures["overhead_us_per_step"] = 1e6 * (1 / summary.median - step_time / row.n)
        figures["extra_latency_us"] = 1e6 * (row.n / summary.median - step_time)
    return figures


# Tables ------------------------------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule, *(line(cells) for cells in rows)])


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _no_figure(row: Row) -> tuple[str, str]:
    """What a row without any sample shows instead: (status, reason)."""
    if row.skipped:
        return "skipped", row.skipped
    return "failed", row.errors[-1] if row.errors else "no data"


def _busy(figures: dict[str, Any]) -> str:
    busy = figures.get("busy_reps", 0)
    return f"{busy}/{figures['reps']}" if busy else ""


def render_workload(result: WorkloadResult, threshold: float) -> str:
    workload = result.workload
    lines = [f"{workload.key}  {workload.title}  ({result.seconds:.0f} s)"]
    if workload.floors:
        return "\n".join([*lines, _render_floors(result, threshold)])
    with_ideal = bool(result.step_times)
    with_sync = workload.key in SYNC_RATIO_WORKLOADS
    with_limit = any(row.label == LIMIT for row in result.rows)
    headers = ["case", "configuration", "steps/s", "min-max", "vs async"]
    if with_sync:
        headers += ["vs sync"]
    if with_limit:
        headers += ["vs limit"]
    if with_ideal:
        headers += ["% ideal"]
    if workload.key in OVERHEAD_WORKLOADS:
        headers += ["overhead µs/step", "extra latency µs"]
    headers += ["busy"]
    table: list[list[str]] = []
    previous_case = None
    for row in result.rows:
        case = row.case if row.case != previous_case else ""
        previous_case = row.case
        figures = row_figures(result, row, threshold)
        if "median" not in figures:
            status, reason = _no_figure(row)
            table.append([case, row.label, status, reason, *[""] * (len(headers) - 4)])
            continue
        mark = BUSY_MARK if figures["busy_reps"] else ""
        cells = [
            case,
            row.label,
            _count(figures["median"]) + mark,
            f"{_count(figures['min'])}-{_count(figures['max'])}",
            _ratio(figures, "ratio_to_async"),
        ]
        if with_sync:
            cells.append(_ratio(figures, "ratio_to_sync"))
        if with_limit:
            cells.append(_ratio(figures, "ratio_to_limit"))
        if with_ideal:
            cells.append(f"{figures['pct_ideal']:.0f}%")
        if workload.key in OVERHEAD_WORKLOADS:
            cells += [
                f"{figures['overhead_us_per_step']:.1f}",
                f"{figures['extra_latency_us']:.0f}",
            ]
        cells.append(_busy(figures))
        table.append(cells)
    right = set(range(2, len(headers) - 1))
    lines.append(_table(headers, table, right))
    lines += _render_limits(result)
    lines += result.notes
    if with_ideal:
        step_time = statistics.median(result.step_times)
        ideals = sorted({row.n for row in result.rows})
        lines.append(
            f"ideal (no env waits for another) = N / mean step time ({step_time * 1e3:.3f} ms "
            "measured here): "
            + ", ".join(f"N={n}: {_count(ideal_rate(result, n) or 0)} steps/s" for n in ideals)
        )
    if workload.key in OVERHEAD_WORKLOADS:
        lines.append(
            "overhead µs/step = 1/(steps/s) - step time/N: wall time each step costs beyond "
            "the ideal; extra latency = N/(steps/s) - step time: what each env waits per step"
        )
    return "\n".join(lines)


def _ratio(figures: dict[str, Any], key: str) -> str:
    return f"{figures[key]:.2f}" if key in figures else ""


def _render_limits(result: WorkloadResult) -> list[str]:
    """How each case's machine limit was computed, from the medians of its inputs (no
    line when no limit was measured)."""
    details = {
        row.case: limit_detail(row) for row in result.rows if row.label == LIMIT and row.samples
    }
    if not details:
        return []
    cores = int(next(iter(details.values()))["cores"])
    cases = "; ".join(
        f"{case}: t_env {detail['t_env_us']:.1f} µs, t_script {detail['t_script_us']:.1f} µs"
        for case, detail in details.items()
    )
    return [
        f"{LIMIT} = N / max((N * t_env + t_script) / cores, t_script), cores = {cores}; "
        "t_env: one env step in SyncVectorEnv, t_script: the policy and the loop per lockstep "
        f"step, both timed in the same run (medians): {cases}"
    ]


def _render_floors(result: WorkloadResult, threshold: float) -> str:
    headers = ["path", "µs/round trip", "min-max µs", "round trips/s", "busy"]
    table: list[list[str]] = []
    for row in result.rows:
        figures = row_figures(result, row, threshold)
        if "median" not in figures:
            status, reason = _no_figure(row)
            table.append([row.label, status, reason, "", ""])
            continue
        label = row.label if row.kind == "floor" else f"{row.label} (no-op env)"
        mark = BUSY_MARK if figures["busy_reps"] else ""
        table.append(
            [
                label,
                f"{1e6 / figures['median']:.1f}{mark}",
                f"{1e6 / figures['max']:.1f}-{1e6 / figures['min']:.1f}",
                _count(figures["median"]),
                _busy(figures),
            ]
        )
    return _table(headers, table, {1, 2, 3})


def render_header(meta: dict[str, Any]) -> str:
    packages = ", ".join(
        f"{name} {version or 'not installed'}" for name, version in meta["packages"].items()
    )
    probe = meta["idle_probe_foreign_cores"]
    lines = [
        f"aioenv benchmarks ({meta['scale']}): {meta['reps']} repetitions, "
        f"{meta['timing']['warmup']:g} s warm-up + {meta['timing']['budget']:g} s window each, "
        "aioenv on uvloop",
        f"CPUs: {meta['cpu_count']} ({meta['cpus_usable']} usable by this process; "
        f"{meta['cpu_model']}); {meta['platform']}",
        f"Python {meta['python']}; {packages}",
        f"aioenv measured at commit {meta['git']['commit']}"
        + (" with uncommitted changes in aioenv/" if meta["git"]["aioenv_modified"] else ""),
        "load average (1, 5, 15 min): before "
        + " ".join(f"{value:.2f}" for value in meta["load_before"])
        + (
            ", after " + " ".join(f"{value:.2f}" for value in meta["load_after"])
            if "load_after" in meta
            else ""
        ),
        "other programs used "
        + (f"{probe:.2f} cores" if probe is not None else "an unknown share")
        + f" during a {meta['idle_probe_s']:g} s idle probe before the run",
    ]
    for reason in meta["busy_at_start"]:
        lines.append(f"WARNING: the machine was busy when the run started: {reason}")
    return "\n".join(lines)


# Chart -------------------------------------------------------------------------------------
def write_chart(results: list[WorkloadResult], threshold: float, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "chart skipped: matplotlib is not installed (pip install 'matplotlib>=3.7')"
    # gymnasium keeps grey and red everywhere; the other rows take the remaining tab20 colors
    # in order of first appearance.
    palette = plt.get_cmap("tab20")
    free = [palette(index) for index in (0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 16, 17, 18, 19)]
    colors: dict[str, Any] = {"gym SyncVectorEnv": "tab:gray", REFERENCE: "tab:red"}
    for label in (row.label for result in results for row in result.rows):
        if label not in colors:
            colors[label] = free[(len(colors) - 2) % len(free)]
    figure, axes = plt.subplots(
        len(results), 1, figsize=(13, 4.2 * len(results)), squeeze=False, layout="constrained"
    )
    for axis, result in zip(axes[:, 0], results, strict=True):
        cases = list(dict.fromkeys(row.case for row in result.rows))
        series = list(dict.fromkeys(row.label for row in result.rows))
        width = 0.8 / max(len(series), 1)
        for index, label in enumerate(series):
            xs: list[float] = []
            heights: list[float] = []
            errors: list[list[float]] = [[], []]
            hatches: list[str] = []
            for position, case in enumerate(cases):
                found = next((r for r in result.rows if r.case == case and r.label == label), None)
                summary = summarize(found, threshold) if found is not None else None
                if summary is None:
                    continue
                value, low, high = summary.median, summary.low, summary.high
                if result.workload.floors:  # microseconds per round trip
                    value, low, high = 1e6 / value, 1e6 / high, 1e6 / low
                xs.append(position + (index - (len(series) - 1) / 2) * width)
                heights.append(value)
                errors[0].append(value - low)
                errors[1].append(high - value)
                hatches.append("//" if summary.busy else "")
            bars = axis.bar(
                xs, heights, width, yerr=errors, label=label, color=colors[label], capsize=2
            )
            for bar, hatch in zip(bars, hatches, strict=True):
                bar.set_hatch(hatch)
        axis.set_xticks(range(len(cases)), cases)
        axis.set_yscale("log")
        unit = "µs per round trip (lower is better)" if result.workload.floors else "env steps/s"
        axis.set_ylabel(unit)
        axis.set_title(f"{result.workload.key}: {result.workload.title}", fontsize=10)
        axis.grid(axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=7, ncols=2, loc="best")
    figure.suptitle("aioenv vs gymnasium vector envs (median, min-max; hatched: machine busy)")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"chart: {path}"


# Main --------------------------------------------------------------------------------------
def parse_args(
    argv: list[str] | None,
) -> tuple[Settings, list[str], Path, bool, list[Config]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller cases, shorter windows")
    parser.add_argument(
        "--only",
        help="e.g. W1,W3 (default: all; with --quick all but W11 to W13, which it runs only "
        "when named here)",
    )
    parser.add_argument("--reps", type=int, help="repetitions (default 3, quick 2)")
    parser.add_argument("--budget", type=float, help="seconds per measurement window")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up before each window")
    parser.add_argument(
        "--busy-threshold",
        type=float,
        help="cores used by other programs above which a figure is marked busy (0.25)",
    )
    parser.add_argument(
        "--rows",
        help="run only the configurations whose label contains one of these comma-separated "
        "strings, e.g. 'ray,aioenv process / state' (default: all)",
    )
    parser.add_argument(
        "--envs",
        type=int,
        default=REAL_N,
        help=f"W11 and W12's envs per vector env (default {REAL_N}; on a machine of many "
        "cores, e.g. 2 per core)",
    )
    parser.add_argument(
        "--cases",
        help="run only the cases of these comma-separated labels, e.g. 'N=32 random,N=32 MLP' "
        "(default: all)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where latest.json/png go")
    parser.add_argument("--no-chart", action="store_true", help="do not draw latest.png")
    args = parser.parse_args(argv)
    base = DEFAULTS["quick" if args.quick else "full"]
    settings = Settings(
        base.scale,
        args.reps if args.reps is not None else base.reps,
        Timing(
            warmup=args.warmup if args.warmup is not None else base.timing.warmup,
            budget=args.budget if args.budget is not None else base.timing.budget,
        ),
        args.busy_threshold if args.busy_threshold is not None else base.busy_threshold,
        base.probe_s,
        args.envs,
        tuple(part.strip() for part in (args.cases or "").split(",") if part.strip()),
    )
    if args.only is None:
        only = list(QUICK_DEFAULT if args.quick else WORKLOADS)
    else:
        only = [key.strip().upper() for key in args.only.split(",") if key.strip()]
    unknown = [key for key in only if key not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {WORKLOADS}")
    if settings.reps < 1 or settings.timing.budget <= 0 or settings.timing.warmup < 0:
        parser.error("--reps must be >= 1, --budget > 0, --warmup >= 0")
    if settings.real_n < 1:
        parser.error("--envs must be >= 1")
    configs = CONFIGS
    if args.rows:
        wanted = [part.strip() for part in args.rows.split(",") if part.strip()]
        configs = [c for c in CONFIGS if any(part in c["label"] for part in wanted)]
        if not configs:
            parser.error(f"no configuration label contains any of {wanted}")
    return settings, only, args.out, not args.no_chart, configs


def select_cases(workloads: dict[str, Workload], labels: tuple[str, ...]) -> dict[str, Workload]:
    """The workloads with only the cases named in ``labels`` (all of them when it is empty)."""
    if not labels:
        return workloads
    known = {case.key for workload in workloads.values() for case in workload.cases}
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {sorted(known)}")
    return {
        key: dataclasses.replace(
            workload, cases=[case for case in workload.cases if case.key in labels]
        )
        for key, workload in workloads.items()
    }


def busy_at_start(meta: dict[str, Any], threshold: float) -> list[str]:
    """Why the machine counts as busy before the first measurement (empty if it does not)."""
    reasons: list[str] = []
    cpus = os.cpu_count() or 1
    if meta["load_before"][0] > cpus:
        reasons.append(f"1-minute load average {meta['load_before'][0]:.2f} > {cpus} CPUs")
    probe = meta["idle_probe_foreign_cores"]
    if probe is not None and probe > threshold:
        reasons.append(
            f"other programs used {probe:.2f} cores during the idle probe (> {threshold:g})"
        )
    return reasons


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    settings, only, out, chart, configs = parse_args(argv)
    with run_lock():
        started = time.monotonic()
        meta: dict[str, Any] = host_info()
        meta.update(
            scale=settings.scale,
            reps=settings.reps,
            timing=dataclasses.asdict(settings.timing),
            busy_threshold_cores=settings.busy_threshold,
            workloads=only,
            command=sys.argv,
            started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            load_before=list(load_average()),
            idle_probe_s=settings.probe_s,
            git=git_state(str(HERE.parent)),
        )
        account = CpuAccount()
        probe = idle_probe(account, settings.probe_s)
        meta["idle_probe_foreign_cores"] = probe
        meta["busy_at_start"] = busy_at_start(meta, settings.busy_threshold)
        print(render_header(meta), file=sys.stderr, flush=True)
        workloads = select_cases(build_workloads(settings.scale, settings.real_n), settings.cases)
        planned = settings.reps * sum(measurements_per_rep(workloads[key], configs) for key in only)
        estimate = settings.reps * sum(
            measurements_per_rep(workloads[key], configs)
            * (_window(workloads[key].timing or settings.timing) + _overhead(workloads[key]))
            for key in only
        )
        progress(
            f"{planned} measurements, about {estimate / 60:.1f} min "
            "(progress on stderr, report on stdout)"
        )
        results: list[WorkloadResult] = []
        for key in only:
            progress(f"{key}: {workloads[key].title}")
            results.append(
                run_workload(
                    workloads[key],
                    configs,
                    reps=settings.reps,
                    timing=settings.timing,
                    account=account,
                    progress=progress,
                )
            )
        meta["load_after"] = list(load_average())
        meta["seconds"] = time.monotonic() - started

    threshold = settings.busy_threshold
    print()
    print(render_header(meta))
    for result in results:
        print()
        print(render_workload(result, threshold))
    total = sum(len(row.samples) for result in results for row in result.rows)
    busy = sum(
        sample.busy(threshold)
        for result in results
        for row in result.rows
        for sample in row.samples
    )
    print()
    if busy:
        print(
            f"{BUSY_MARK} {busy} of {total} measurements were taken while other programs used "
            f"more than {threshold:g} cores (measured from /proc around each window); the "
            "figures marked * include them and may be low"
        )
    else:
        print(f"no measurement saw other programs use more than {threshold:g} cores")
    if meta["busy_at_start"]:
        print("the machine was already busy when the run started (see the header)")
    if meta["git"]["aioenv_modified"]:
        print("aioenv/ had uncommitted changes: these figures are for the working tree")

    out.mkdir(parents=True, exist_ok=True)
    document = {
        "meta": meta,
        "workloads": {
            result.workload.key: {
                "title": result.workload.title,
                "seconds": result.seconds,
                "step_times": result.step_times,
                "notes": result.notes,
                "rows": [
                    {"case": row.case, "n": row.n, **row_figures(result, row, threshold)}
                    for row in result.rows
                ],
            }
            for result in results
        },
    }
    json_path = out / "latest.json"
    json_path.write_text(json.dumps(document, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"results: {json_path}")
    if chart:
        print(write_chart(results, threshold, out / "latest.png"))
    print(f"total {meta['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
