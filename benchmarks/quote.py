"""Quote one benchmark report in the README and the docs, so no figure is typed by hand.

    python benchmarks/quote.py            # rewrite the quoted blocks from results/latest.json
    python benchmarks/quote.py --check    # exit 1, with a diff, if a page differs from that
    python benchmarks/quote.py REPORT.json

A page marks each block this script writes, on lines of their own:

    <!-- figures: NAME -->
    ...
    <!-- /figures -->

NAME is one of ``QUOTES`` below. Every figure comes from the one report (a full
``make bench``), whose command, commit and machine each page names. The figures are
those ``run.py`` stored for each row (``row_figures``: medians, ratios, % of the ideal); this
script computes none of its own beyond one row's median over another's in the same case and
the time a lockstep step took (N over the median).
Each advice row quotes aioenv's row beside the peers measured in the same case, and says so
when a peer was faster.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plot import provenance

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_REPORT = HERE / "results" / "latest.json"
#: The pages that quote the report, relative to the repository's root.
PAGES = ("README.md", "docs/guides/performance.md")
SYNC = "gym SyncVectorEnv"
ASYNC = "gym AsyncVectorEnv"
DEFAULT = "AioVectorEnv default (auto)"
LIMIT = "machine limit (computed)"  # lockstep.LIMIT
ENVPOOL_PONG = "EnvPool Pong-v5 (EnvPool's own preprocessing)"
ENVPOOL_CHEETAH = "EnvPool HalfCheetah-v5 (EnvPool's own env)"
BARE_LOCKSTEP = "reference: bare lockstep, a child per core"  # lockstep.BARE_LOCKSTEP
BARE_ENGINE = (  # lockstep.BARE_ENGINE
    "reference: bare engine (shared buffer, kernel wake), a child per core"
)
BARE_PIPELINED = "reference: bare pipelined (a child per B envs)"  # pipelined.BARE_PIPELINED
BARE_PER_STATE = "reference: bare per-state (a child per env)"  # W1's, workloads.py
SPLIT = "AioVectorEnv process, envs_per_worker=N/cores"
SPLIT_ASLEEP = "AioVectorEnv process, envs_per_worker=N/cores, idle_spin=0"
SPLIT_POLLING = "AioVectorEnv process, envs_per_worker=N/cores, idle_spin=0.002"
RESTARTING = "AioVectorEnv default with restart='on_failure' and step_timeout=60"  # lockstep.py
WIDTH = 90  # the pages' prose is wrapped at about this width; tables stay one row a line
BUSY_MARK = "*"  # run.py's mark for a figure taken while other programs were busy

_BLOCK = re.compile(
    r"(?P<start><!-- figures: (?P<name>[\w-]+) -->)(?P<body>.*?)(?P<end><!-- /figures -->)",
    re.S,
)
_OPENING = re.compile(r"<!-- figures: (?P<name>[^>]*?) -->")


class QuoteError(Exception):
    """The report lacks a figure a page quotes, or a page's markers are broken."""


@dataclasses.dataclass
class Figures:
    """One report's rows, looked up by workload, case and label; remembers which quoted
    figures were taken while the machine was busy, so the block can say so."""

    report: dict[str, Any]
    busy: list[str] = dataclasses.field(default_factory=list)

    def row(self, workload: str, case: str, label: str) -> dict[str, Any]:
        rows = self.report["workloads"].get(workload, {}).get("rows")
        if rows is None:
            raise QuoteError(f"the report has no {workload}: quote a full `make bench` run")
        found = next((r for r in rows if r["case"] == case and r["label"] == label), None)
        if found is None:
            raise QuoteError(f"the report's {workload} has no row {label!r} in case {case!r}")
        if found.get("median") is None:
            why = found.get("skipped") or "; ".join(found.get("errors") or []) or "no samples"
            raise QuoteError(f"{workload} {case} {label!r} has no figure: {why}")
        if found.get("busy_reps"):
            self.busy.append(f"{workload} {case} {label}")
        return dict(found)

    def rate(self, workload: str, case: str, label: str) -> str:
        """Steps/s, as run.py prints it (with its busy mark)."""
        return steps(self.row(workload, case, label))

    def ratio(self, workload: str, case: str, label: str, to: str) -> str:
        """A row's ratio to ``to`` (``sync``, ``async`` or ``limit``), as run.py stored it."""
        return times(self.row(workload, case, label)[f"ratio_to_{to}"])

    def over(self, workload: str, case: str, label: str, other: str) -> str:
        """One row's median over another's in the same case."""
        mine = self.row(workload, case, label)["median"]
        return times(mine / self.row(workload, case, other)["median"])

    def faster(self, workload: str, case: str, label: str, other: str) -> bool:
        """Did row ``label`` measure more steps/s than row ``other`` in the same case?"""
        row, peer = self.row(workload, case, label), self.row(workload, case, other)
        return bool(row["median"] > peer["median"])

    def beaten(self, workload: str, case: str, label: str, peers: dict[str, str]) -> str:
        """What to append when peers (name: label) beat row ``label``: "; NAME faster here"."""
        faster = [name for name, peer in peers.items() if self.faster(workload, case, peer, label)]
        return f"; {' and '.join(faster)} faster here" if faster else ""

    def microseconds(self, workload: str, case: str, label: str) -> str:
        """Microseconds per step (or round trip), as run.py stored it."""
        row = self.row(workload, case, label)
        return f"{row['us_per_step']:.1f}{_mark(row)}"

    def ideal(self, workload: str, case: str, label: str) -> str:
        row = self.row(workload, case, label)
        return f"{row['pct_ideal']:.0f}%{_mark(row)}"

    def limit_detail(self, workload: str, case: str, key: str) -> float:
        """An input of the machine limit (``t_env_us``, ``t_script_us``), its median."""
        return float(self.row(workload, case, LIMIT)["limit_detail"][key])

    def source(self) -> str:
        """Which run the figures come from, in one sentence."""
        meta = self.report["meta"]
        if meta.get("scale") != "full":
            raise QuoteError(f"the report is a {meta.get('scale')} run: quote a full `make bench`")
        timing = meta["timing"]
        modified = meta["git"].get("aioenv_modified")
        command, commit_and_machine = provenance(meta).split(" at commit ", 1)
        return (
            f"Measured by `{command}` at commit {commit_and_machine}"
            + (" (aioenv/ with uncommitted changes)" if modified else "")
            + f", {meta['reps']} interleaved repetitions of {timing['budget']:g} s windows, "
            "medians, aioenv on uvloop"
        )

    def busy_note(self) -> str:
        if not self.busy:
            return ""
        return (
            f"\n\nFigures marked {BUSY_MARK} were taken while other programs used more than "
            f"{self.report['meta']['busy_threshold_cores']:g} cores: they may be low."
        )


def steps(row: dict[str, Any]) -> str:
    return f"{row['median']:,.0f}{_mark(row)}"


def times(value: float) -> str:
    return f"{value:.2f}x"


def _mark(row: dict[str, Any]) -> str:
    return BUSY_MARK if row.get("busy_reps") else ""


# The blocks ---------------------------------------------------------------------------------
# Each takes the report's figures and returns the block's text. Wherever the prose ranks two
# rows (which is faster, what to use), the ranking is read from the figures, so a new report
# that reverses it rewrites the sentence instead of contradicting it.


def _training_script(f: Figures) -> str:
    """AioVectorEnv's default in a lockstep training script (W6, W11, W12), beside
    gymnasium's vector envs and EnvPool's own envs."""
    mlp = "N=8 MLP"
    envpool = [
        f"{f.ratio(key, mlp, label, 'sync')} ({name})"
        for key, label, name in (
            ("W11", ENVPOOL_PONG, "Pong"),
            ("W12", ENVPOOL_CHEETAH, "HalfCheetah"),
        )
    ]
    return (
        f"W6 CartPole + MLP: {f.ratio('W6', 'N=4', DEFAULT, 'sync')} `SyncVectorEnv` (N=4), "
        f"{f.ratio('W6', 'N=16', DEFAULT, 'sync')} (N=16), inline; "
        f"W11 Atari Pong N=8: {f.ratio('W11', mlp, DEFAULT, 'sync')} `SyncVectorEnv`, "
        f"{f.ratio('W11', mlp, DEFAULT, 'async')} `AsyncVectorEnv`, 2 children; "
        f"W12 HalfCheetah N=8: {f.ratio('W12', mlp, DEFAULT, 'sync')} `SyncVectorEnv`, "
        f"inline; EnvPool's own C++ envs: {', '.join(envpool)} `SyncVectorEnv`"
    )


def _grouped(f: Figures) -> str:
    """Cheap envs in an async loop: grouped process workers, beside both gymnasium loops."""
    case, label = "N=16", "aioenv process, 8 envs/worker"
    as_fast = f"{f.over('W1', case, SYNC, label)} as fast ({f.rate('W1', case, SYNC)})"
    if f.faster("W1", case, SYNC, label):
        sync = f"`SyncVectorEnv` is {as_fast} where the loop need not be async"
    else:
        sync = f"`SyncVectorEnv` {as_fast}"
    return (
        f"W1 CartPole N=16: {f.rate('W1', case, label)} steps/s, "
        f"{f.ratio('W1', case, label, 'async')} `AsyncVectorEnv`; {sync}"
    )


def _stragglers(f: Figures) -> str:
    case = "N=8"
    thread, process = "aioenv thread / state", "aioenv process / state"
    return (
        f"W2 N=8: {f.rate('W2', case, thread)} / {f.rate('W2', case, process)} steps/s, "
        f"{f.ideal('W2', case, thread)} / {f.ideal('W2', case, process)} of the no-wait ideal; "
        f"`AsyncVectorEnv` {f.rate('W2', case, ASYNC)} ({f.ideal('W2', case, ASYNC)}), "
        f"`SyncVectorEnv` {f.rate('W2', case, SYNC)} ({f.ideal('W2', case, SYNC)})"
        + f.beaten("W2", case, thread, {"`AsyncVectorEnv`": ASYNC, "`SyncVectorEnv`": SYNC})
    )


_IMAGES = "210x160x3 N=8"
_SHARED, _SOCKET = "aioenv process / state", "aioenv process, socket / state"
_INLINE_POOL = "aioenv sync / state"


def _images_use(f: Figures, *, why: bool = False) -> str:
    """In-process when that measured fastest for an env whose frame is its only cost."""
    shared = "shared memory (automatic from 8 KiB)"
    if f.faster("W3", _IMAGES, _INLINE_POOL, _SHARED):
        reason = " (a copy costs less than a hand-off)" if why else ""
        return f"in-process when the step is cheap{reason}; in processes, {shared}"
    return f'`mode="process"`, {shared}'


def _images(f: Figures) -> str:
    return (
        f'W3 210x160x3 frames that cost nothing else, N=8: `mode="sync"` '
        f"{f.rate('W3', _IMAGES, _INLINE_POOL)}, `SyncVectorEnv` {f.rate('W3', _IMAGES, SYNC)} "
        f"steps/s; process workers {f.rate('W3', _IMAGES, _SHARED)} with shared memory, "
        f"{f.rate('W3', _IMAGES, _SOCKET)} through the socket, `AsyncVectorEnv` "
        f"{f.rate('W3', _IMAGES, ASYNC)}"
    )


def _waiting(f: Figures) -> str:
    case = "N=1000"
    return (
        f"W7, 1,000 envs awaiting 10 ms: {f.rate('W7', case, 'aioenv async / state')} steps/s "
        f"against {f.rate('W7', case, 'aioenv thread / state')} for thread workers "
        f"({f.rate('W7', case, 'aioenv thread / batch')} with `get_batch`); no gymnasium rows "
        "(1,000 processes)"
        + f.beaten(
            "W7",
            case,
            "aioenv async / state",
            {
                "thread workers": "aioenv thread / state",
                "`get_batch` threads": "aioenv thread / batch",
            },
        )
    )


def _rollout(f: Figures) -> str:
    case = "N=8"
    return (
        f"W9, 8 process workers: {f.rate('W9', case, 'aioenv process / rollout in workers')} "
        f"steps/s against {f.rate('W9', case, 'aioenv process / policy in parent')} with the "
        "policy in the parent"
        + f.beaten(
            "W9",
            case,
            "aioenv process / rollout in workers",
            {"the policy in the parent": "aioenv process / policy in parent"},
        )
    )


def _ray(f: Figures) -> str:
    case, ray, process = "N=8", "aioenv ray / state", "aioenv process / state"
    faster = "process workers" if f.faster("W8", case, process, ray) else "Ray actors"
    return (
        f"W8, 8 envs stepping 5 ms on one machine: {f.rate('W8', case, ray)} steps/s on Ray "
        f"actors, {f.rate('W8', case, process)} on process workers ({faster} faster there)"
    )


_PONG_B4, _CARTPOLE_B8, _CHEETAH_B4 = "Pong N=8 B=4", "CartPole N=16 B=8", "HalfCheetah N=8 B=4"
_PIPED = "AioVectorEnv pipelined: send/recv"
_PIPED_CHILDREN = "AioVectorEnv pipelined: a child per B envs"  # pipelined.PIPELINED_CHILDREN


def _pipelined_use(f: Figures) -> str:
    use = "`AioVectorEnv(..., batch_size=B)`, `recv`/`send`"
    if f.faster("W13", _PONG_B4, DEFAULT, _PIPED):
        return f"{use}; measured slower than the lockstep default here"
    return use


def _pipelined(f: Figures) -> str:
    return (
        f"W13 Pong N=8, B=4: {f.rate('W13', _PONG_B4, _PIPED)} steps/s, "
        f"{f.ratio('W13', _PONG_B4, _PIPED, 'sync')} `SyncVectorEnv`; the lockstep default "
        f"{f.rate('W13', _PONG_B4, DEFAULT)} ({f.ratio('W13', _PONG_B4, DEFAULT, 'sync')}); "
        f"CartPole N=16, B=8: {f.ratio('W13', _CARTPOLE_B8, _PIPED, 'sync')} `SyncVectorEnv`"
    )


_HEADER = "| your env | use | measured |\n|---|---|---|\n"


def readme_modes(f: Figures) -> str:
    table = _HEADER + "\n".join(
        [
            "| any gymnasium env, synchronous training script | `AioVectorEnv`, default mode | "
            f"{_training_script(f)} |",
            f'| cheap, async loop | `mode="process"`, `envs_per_worker=8` | {_grouped(f)} |',
            '| step times that vary (~1 ms, heavy tail) | `mode="process"`; `mode="thread"` '
            "where the env is safe in threads (not for envs that draw with pygame, such as "
            "CarRacing: refused, see [thread workers](docs/guides/concepts.md#workers)) | "
            f"{_stragglers(f)} |",
            f"| large observations (images) | {_images_use(f)} | {_images(f)} |",
            f'| waits on I/O (server, web API, LLM tool) | `mode="coroutine"` | {_waiting(f)} |',
            "| cheap env and policy, many steps | `pool.rollout` (policy in the workers) | "
            f"{_rollout(f)} |",
            f'| more envs than one machine holds | `mode="ray"` | {_ray(f)} |',
        ]
    )
    return (
        f"{f.source()}; ratios are to gymnasium's vector envs in the same run "
        "([the performance guide](docs/guides/performance.md) has more).\n\n"
        f"{table}{f.busy_note()}"
    )


def guide_modes(f: Figures) -> str:
    table = _HEADER + "\n".join(
        [
            "| any gymnasium env, a synchronous training script | `AioVectorEnv` with its "
            f"default | {_training_script(f)} |",
            f"| the policy on some envs while others step | {_pipelined_use(f)} | "
            f"{_pipelined(f)} |",
            f'| cheap, an async loop | `mode="process"` with `envs_per_worker=8` | {_grouped(f)} |',
            '| step times that vary (about 1 ms, heavy tail) | `mode="process"`, or '
            '`mode="thread"` where the env is safe in threads (GIL released; envs that draw '
            "with pygame are refused: see [thread workers](concepts.md#workers)) | "
            f"{_stragglers(f)} |",
            f"| large observations (images) | {_images_use(f, why=True)} | {_images(f)} |",
            f'| waits on I/O (a server, a web API) | `mode="coroutine"` | {_waiting(f)} |',
            "| cheap env, cheap policy, many steps | `pool.rollout` (policy in the workers) | "
            f"{_rollout(f)} |",
            f'| too many for one machine, or heavy | `mode="ray"` | {_ray(f)} |',
        ]
    )
    return (
        f"{f.source()}; ratios are to gymnasium's vector envs in the same run.\n\n"
        f"{table}{f.busy_note()}"
    )


def guide_figure(f: Figures) -> str:
    mlp = "N=8 MLP"
    grouped = "aioenv process, 8 envs/worker"
    gym = "`AsyncVectorEnv` / `SyncVectorEnv`"
    rows = [
        (
            "W11 Pong N=8, MLP policy",
            "`AioVectorEnv` default (2 children of 4)",
            f.rate("W11", mlp, DEFAULT),
            f"{f.ratio('W11', mlp, DEFAULT, 'sync')} Sync, "
            f"{f.ratio('W11', mlp, DEFAULT, 'limit')} the limit",
        ),
        (
            "W11 Pong N=8, MLP policy",
            gym,
            f"{f.rate('W11', mlp, ASYNC)} / {f.rate('W11', mlp, SYNC)}",
            f"{f.ratio('W11', mlp, ASYNC, 'sync')} / 1.00x Sync",
        ),
        (
            "W11 Pong N=8, MLP policy",
            "EnvPool's own Pong (C++ preprocessing)",
            f.rate("W11", mlp, ENVPOOL_PONG),
            f"{f.ratio('W11', mlp, ENVPOOL_PONG, 'sync')} Sync",
        ),
        (
            "W12 HalfCheetah N=8, MLP policy",
            "`AioVectorEnv` default (inline) / 2 children of 4",
            f"{f.rate('W12', mlp, DEFAULT)} / {f.rate('W12', mlp, SPLIT)}",
            f"{f.ratio('W12', mlp, DEFAULT, 'sync')} / {f.ratio('W12', mlp, SPLIT, 'sync')} Sync",
        ),
        (
            "W12 HalfCheetah N=8, MLP policy",
            gym,
            f"{f.rate('W12', mlp, ASYNC)} / {f.rate('W12', mlp, SYNC)}",
            f"{f.ratio('W12', mlp, ASYNC, 'sync')} / 1.00x Sync",
        ),
        (
            "W12 HalfCheetah N=8, MLP policy",
            "EnvPool's own HalfCheetah-v5",
            f.rate("W12", mlp, ENVPOOL_CHEETAH),
            f"{f.ratio('W12', mlp, ENVPOOL_CHEETAH, 'sync')} Sync",
        ),
        (
            "W13 Pong N=8, B=4",
            "pipelined `send`/`recv` / lockstep default",
            f"{f.rate('W13', _PONG_B4, _PIPED)} / {f.rate('W13', _PONG_B4, DEFAULT)}",
            f"{f.ratio('W13', _PONG_B4, _PIPED, 'sync')} / "
            f"{f.ratio('W13', _PONG_B4, DEFAULT, 'sync')} Sync",
        ),
        (
            "W1 CartPole N=16",
            "process, 8 envs per worker / `SyncVectorEnv`",
            f"{f.rate('W1', 'N=16', grouped)} / {f.rate('W1', 'N=16', SYNC)}",
            f"{f.ratio('W1', 'N=16', grouped, 'async')} / "
            f"{f.ratio('W1', 'N=16', SYNC, 'async')} Async",
        ),
        (
            "W4 round trip, one no-op env",
            "process / thread / sync",
            " / ".join(
                f.microseconds("W4", "N=1", f"aioenv {kind} / state")
                for kind in ("process", "thread", "sync")
            )
            + " µs",
            f"`SyncVectorEnv` {f.microseconds('W4', 'N=1', SYNC)} µs, `AsyncVectorEnv` "
            f"{f.microseconds('W4', 'N=1', ASYNC)} µs",
        ),
    ]
    table = "| workload | what | steps/s | ratio |\n|---|---|---:|---:|\n" + "\n".join(
        "| " + " | ".join(cells) + " |" for cells in rows
    )
    return (
        f"Drawn by `python benchmarks/plot.py` from the same report. {f.source()}. The dashed "
        "line is the machine's limit: `N / max((N * t_env + t_script) / cores, t_script)`, "
        "with one env's step time and the script's own time per step measured in the same "
        f"run.\n\n{table}{f.busy_note()}"
    )


def guide_costs(f: Figures) -> str:
    """Where the time goes: Pong's lockstep step against the limit (W11) and against the
    leanest lockstep design over processes (W11, W12), what spinning children gain (W11,
    W12), what shared memory and coroutine envs cost (W3, W7)."""
    mlp, coroutine = "N=8 MLP", "aioenv async / state"
    default, limit = f.row("W11", mlp, DEFAULT), f.row("W11", mlp, LIMIT)
    step_ms, limit_ms = (1e3 * row["n"] / row["median"] for row in (default, limit))
    inline = (
        "An env that costs nothing but its frame still steps fastest in-process"
        if f.faster("W3", _IMAGES, SYNC, _SHARED)
        else "Even an env that costs nothing but its frame steps faster in processes"
    )
    return (
        "- **What bounds Pong at 2 children of 4**: in lockstep nothing overlaps. The "
        "children step their envs, then the parent decodes and copies 8 stacked 4x84x84 "
        "observations and their infos, then the policy runs; the limit spreads the envs' and "
        f"the script's CPU time over the cores. W11 (MLP): a lockstep step took {step_ms:.2f} ms "
        f"where the limit allows {limit_ms:.2f} ms; `python benchmarks/cpu_split.py lockstep` "
        "shows where the rest goes. A bare lockstep design over processes (`bare.py`'s "
        "reference: a child per core, one message each way per step; no event loop, infos or "
        "supervision, and no shared memory or `idle_spin` either) reached "
        f"{f.ratio('W11', mlp, BARE_LOCKSTEP, 'sync')} `SyncVectorEnv` in the same run, "
        f"against {f.ratio('W11', mlp, DEFAULT, 'sync')} for the default; on HalfCheetah "
        f"(W12, MLP) {f.ratio('W12', mlp, BARE_LOCKSTEP, 'sync')}, against "
        f"{f.ratio('W12', mlp, SPLIT, 'sync')} for 2 children of 4 and "
        f"{f.ratio('W12', mlp, DEFAULT, 'sync')} for the default. The same children "
        "stepping their rows of one shared memory file, woken through eventfds (`bare.py`'s "
        "`BareEngine`, over `aioenv/engine/`'s buffer and wake) reached "
        f"{f.ratio('W11', mlp, BARE_ENGINE, 'sync')} on Pong and "
        f"{f.ratio('W12', mlp, BARE_ENGINE, 'sync')} on HalfCheetah. "
        "`python benchmarks/cpu_split.py loop` measures a step through the engine beside one "
        "through a pool, with and without its event loop.\n"
        "- **What bounds pipelining**: a bare pipelined design over processes (`bare.py`'s "
        "`BarePipelined`: a child per B envs, the script blocking in `select` on their "
        "sockets; no event loop, infos or supervision) reached "
        f"{f.ratio('W13', _PONG_B4, BARE_PIPELINED, 'sync')} `SyncVectorEnv` on W13 Pong "
        f"(N=8, B=4), against {f.ratio('W13', _PONG_B4, _PIPED, 'sync')} for "
        "`recv`/`send`; on CartPole (N=16, B=8) "
        f"{f.ratio('W13', _CARTPOLE_B8, BARE_PIPELINED, 'sync')}, against "
        f"{f.ratio('W13', _CARTPOLE_B8, _PIPED, 'sync')} for `recv`/`send`, which steps "
        "envs this cheap in line: in the bare design's layout (a process worker of 8 envs "
        f"each) aioenv made {f.ratio('W13', _CARTPOLE_B8, _PIPED_CHILDREN, 'sync')}; on "
        f"HalfCheetah (N=8, B=4, W12's MLP) {f.ratio('W13', _CHEETAH_B4, BARE_PIPELINED, 'sync')}"
        f", against {f.ratio('W13', _CHEETAH_B4, _PIPED, 'sync')} in line and "
        f"{f.ratio('W13', _CHEETAH_B4, _PIPED_CHILDREN, 'sync')} in that layout. The gap "
        "is aioenv's own cost per hand-off, on both sides of the process boundary.\n"
        "- **What a per-state hand-off costs**: W1 CartPole N=8, 8 process workers acting on "
        f"whichever state is ready first: {f.rate('W1', 'N=8', _SHARED)} steps/s "
        f"({f.ratio('W1', 'N=8', _SHARED, 'async')} `AsyncVectorEnv`). A bare per-state design "
        "(`bare.py` with a child per env: the script on uvloop acting on whichever child "
        "answers first, one message each way, episodes reset inside the step; no pool, infos "
        f"or supervision) made {f.rate('W1', 'N=8', BARE_PER_STATE)} "
        f"({f.ratio('W1', 'N=8', BARE_PER_STATE, 'async')}) in the same run. At a few µs of "
        "env per step, what each message costs on both sides of the process boundary (the "
        "pool's bookkeeping, the wire format, the child's runner) sets the rate.\n"
        "- **`idle_spin`**, 2 children of 4 always polling between lockstep steps "
        "(`idle_spin=0.002` given) against the same children asleep (`idle_spin=0`): W11 "
        f"Pong {f.rate('W11', 'N=8 random', SPLIT_POLLING)} against "
        f"{f.rate('W11', 'N=8 random', SPLIT_ASLEEP)} steps/s (random actions), "
        f"{f.rate('W11', mlp, SPLIT_POLLING)} against {f.rate('W11', mlp, SPLIT_ASLEEP)} "
        f"(MLP); W12 HalfCheetah {f.rate('W12', mlp, SPLIT_POLLING)} against "
        f"{f.rate('W12', mlp, SPLIT_ASLEEP)} (MLP). Left to the rule (polling, tried asleep "
        "now and then), the same children made "
        f"{f.rate('W11', 'N=8 random', SPLIT)}, {f.rate('W11', mlp, SPLIT)} and "
        f"{f.rate('W12', mlp, SPLIT)}.\n"
        '- **A long run\'s options** (`restart="on_failure", step_timeout=60`): the step '
        "deadline rules out stepping in line (a step in the calling thread cannot be "
        "abandoned), not the default's children: W11 Pong (MLP) "
        f"{f.ratio('W11', mlp, RESTARTING, 'sync')} `SyncVectorEnv` with them, "
        f"{f.ratio('W11', mlp, DEFAULT, 'sync')} without. Envs the default steps in line "
        'are grouped as `mode="process"` groups them, and pay for the hand-off; '
        "`mode_choice.reason` names the deadline. Restarts alone keep them in line (below).\n"
        "- **Shared memory** against the socket, process workers, N=8: "
        f"{f.over('W3', '84x84x4 N=8', _SHARED, _SOCKET)} the socket's rate at 84x84x4 (28 KB), "
        f"{f.over('W3', _IMAGES, _SHARED, _SOCKET)} at 210x160x3 (100 KB); "
        '`shared_memory="auto"` reads observations of 8 KiB or more in place (views with '
        "`copy=False`) and copies smaller ones out. "
        f"{inline} (W3's `SyncVectorEnv`: {f.rate('W3', _IMAGES, SYNC)} steps/s at "
        "210x160x3).\n"
        "- **Coroutine envs**: at 1,000 envs the envs wait in parallel and the loop's own work "
        f"per state is the bound, {f.microseconds('W7', 'N=1000', coroutine)} µs a step "
        f"({f.ideal('W7', 'N=1000', coroutine)} of the ideal N / 10 ms)."
        f"{f.busy_note()}"
    )


_TORCHRL_PARALLEL = "TorchRL ParallelEnv"  # peers.TORCHRL_PARALLEL
_TORCHRL_POOL = "TorchRL AsyncEnvPool (processes)"  # peers.TORCHRL_POOL
_SB3 = "SB3 SubprocVecEnv"  # peers.SB3_SUBPROC


def guide_peers(f: Figures) -> str:
    """The other libraries' pools in the same cases as aioenv's rows (W1, W2, W6, W11),
    and Ray's call paths beside aioenv's Ray workers (W8)."""
    mlp, state = "N=8 MLP", "aioenv process / state"
    rows = [
        (
            "W1 CartPole N=8, first-ready per state, steps/s (x `AsyncVectorEnv`)",
            f"{f.rate('W1', 'N=8', state)} ({f.ratio('W1', 'N=8', state, 'async')}), "
            "8 process workers",
            *(
                f"{f.rate('W1', 'N=8', label)} ({f.ratio('W1', 'N=8', label, 'async')})"
                for label in (_TORCHRL_PARALLEL, _TORCHRL_POOL)
            ),
            "-",
            f"{f.rate('W1', 'N=8', ASYNC)} (1.00x)",
        ),
        (
            "W2 N=8 stragglers, steps/s (% of the no-wait ideal)",
            f"{f.rate('W2', 'N=8', state)} ({f.ideal('W2', 'N=8', state)}), 8 process workers",
            *(
                f"{f.rate('W2', 'N=8', label)} ({f.ideal('W2', 'N=8', label)})"
                for label in (_TORCHRL_PARALLEL, _TORCHRL_POOL)
            ),
            "-",
            f"{f.rate('W2', 'N=8', ASYNC)} ({f.ideal('W2', 'N=8', ASYNC)})",
        ),
        *(
            (
                f"{title}, x `SyncVectorEnv`",
                f"{f.ratio(key, case, DEFAULT, 'sync')}, `AioVectorEnv` default",
                *(
                    f.ratio(key, case, label, "sync")
                    for label in (_TORCHRL_PARALLEL, _TORCHRL_POOL, _SB3, ASYNC)
                ),
            )
            for key, case, title in (
                ("W6", "N=16", "W6 CartPole N=16 + MLP, lockstep"),
                ("W11", mlp, "W11 Atari Pong N=8 + MLP, lockstep"),
            )
        ),
    ]
    table = (
        "| workload | aioenv | TorchRL `ParallelEnv` | TorchRL `AsyncEnvPool` (processes) "
        "| SB3 `SubprocVecEnv` | gymnasium `AsyncVectorEnv` |\n"
        "|---|---|---:|---:|---:|---:|\n"
        + "\n".join("| " + " | ".join(cells) + " |" for cells in rows)
    )
    case = "N=8"
    ray, ray4 = "aioenv ray / state", "aioenv ray x4 / state"
    calls, calls4 = "aioenv ray calls / state", "aioenv ray x4 calls / state"
    actor, actor4 = "reference: bare Ray actor call", "reference: bare Ray actor call x4"
    graph, graph4 = "reference: bare Ray compiled graph", "reference: bare Ray compiled graph x4"
    packages = f.report["meta"]["packages"]
    versions = ", ".join(
        f"{name} {packages[name]}"
        for name in ("torchrl", "torch", "stable-baselines3", "ray")
        if packages.get(name)
    )
    return (
        f"{f.source()}"
        + (f"; {versions}" if versions else "")
        + ". TorchRL's `AsyncEnvPool` and aioenv act on whichever env is ready first in "
        "W1 and W2; `ParallelEnv` steps all of them together.\n\n"
        f"{table}\n\n"
        f"Ray (W8, 8 envs stepping 5 ms, % of the ideal N / 5 ms): aioenv's Ray workers, "
        f"whose steps go on a direct connection to each actor, "
        f"{f.ideal('W8', case, ray)} with an env per actor and {f.ideal('W8', case, ray4)} "
        f"with 4 envs per actor; with every message as an actor call "
        f"(`direct_connection=False`) {f.ideal('W8', case, calls)} and "
        f"{f.ideal('W8', case, calls4)}. In the same run a bare Ray actor call per step "
        f"reached {f.ideal('W8', case, actor)} and {f.ideal('W8', case, actor4)}, and Ray's "
        f"compiled graphs {f.ideal('W8', case, graph)} and {f.ideal('W8', case, graph4)}. "
        f"Ray's own processes share the machine's cores with the envs. Process workers: "
        f"{f.ideal('W8', case, state)}."
        f"{f.busy_note()}"
    )


def guide_step_costs(f: Figures) -> str:
    """Why the default steps cheap envs inline and costly ones in processes, with the step
    times W6 (CartPole) and W11 (Pong) measured for their machine limits."""
    cartpole = f.limit_detail("W6", "N=16", "t_env_us")
    pong = f.limit_detail("W11", "N=8 random", "t_env_us")
    return (
        f"For an env as cheap as CartPole (about {_two_figures(cartpole)} µs a step in "
        "`SyncVectorEnv`, W6), the hand-off to another thread or process costs more than the "
        "step, so `AioVectorEnv` steps such envs inline, in the calling thread, at "
        "`SyncVectorEnv`'s cost; for costly envs (Atari Pong: about "
        f"{_two_figures(pong)} µs a step, W11) it uses a child process per core. It times "
        'the env to choose (`mode="auto"`, the default; see '
        "[the gymnasium guide](gymnasium.md)); `python benchmarks/choice.py` measures the "
        "hand-off figures the rule uses, on envs whose step burns a set CPU time:"
    )


def _two_figures(value: float) -> str:
    """Two significant figures: the reader needs the order of magnitude."""
    return f"{float(f'{value:.2g}'):,g}"


#: Each block's name, as the pages mark it, and what writes it.
QUOTES: dict[str, Callable[[Figures], str]] = {
    "readme-modes": readme_modes,
    "guide-step-costs": guide_step_costs,
    "guide-modes": guide_modes,
    "guide-figure": guide_figure,
    "guide-costs": guide_costs,
    "guide-peers": guide_peers,
}


# Pages --------------------------------------------------------------------------------------
def wrap(text: str) -> str:
    """Prose and bullets filled to ``WIDTH``, as the pages are written; table rows as they are."""
    lines: list[str] = []
    for line in text.split("\n"):
        if line.startswith("|") or not line:
            lines.append(line)
            continue
        bullet = line.startswith("- ")
        lines += textwrap.wrap(
            line,
            WIDTH,
            subsequent_indent="  " if bullet else "",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def requote(text: str, report: dict[str, Any], where: str) -> str:
    """``text`` with every marked block rewritten from ``report``."""
    for opening in _OPENING.finditer(text):
        if opening.group("name") not in QUOTES:
            raise QuoteError(
                f"{where}: unknown block {opening.group('name')!r}; known: {', '.join(QUOTES)}"
            )
    if len(_OPENING.findall(text)) != text.count("<!-- /figures -->"):
        raise QuoteError(f"{where}: every `<!-- figures: NAME -->` needs its `<!-- /figures -->`")

    def rewrite(match: re.Match[str]) -> str:
        body = wrap(QUOTES[match.group("name")](Figures(report)))
        return f"{match.group('start')}\n{body}\n{match.group('end')}"

    return _BLOCK.sub(rewrite, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_REPORT)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a page would change"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="where the pages are")
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text(encoding="utf-8"))
    try:
        texts = {page: (args.root / page).read_text(encoding="utf-8") for page in PAGES}
        unquoted = set(QUOTES) - {
            name for text in texts.values() for name in _OPENING.findall(text)
        }
        # Every page is quoted before any is written: a missing figure changes nothing.
        quoted = {page: requote(text, report, page) for page, text in texts.items()}
        if unquoted:
            raise QuoteError(f"no page quotes {', '.join(sorted(unquoted))} (pages: {PAGES})")
    except QuoteError as error:
        print(f"quote.py: {error}", file=sys.stderr)
        return 2
    stale = [page for page in PAGES if quoted[page] != texts[page]]
    for page in stale:
        if args.check:
            sys.stdout.writelines(
                difflib.unified_diff(
                    texts[page].splitlines(keepends=True),
                    quoted[page].splitlines(keepends=True),
                    f"{page} (as it stands)",
                    f"{page} (quoting {args.report.name})",
                )
            )
        else:
            (args.root / page).write_text(quoted[page], encoding="utf-8")
    if args.check and stale:
        print(
            f"{', '.join(stale)}: the figures differ from {args.report}; run "
            "`python benchmarks/quote.py` to quote it",
            file=sys.stderr,
        )
        return 1
    print(f"{'re-quoted' if stale else 'unchanged'}: {', '.join(stale) or ', '.join(PAGES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
