"""The README and the docs quote the benchmark report (benchmarks/results/latest.json)
exactly as ``benchmarks/quote.py`` writes it: a hand-edited figure, or a new report that was
not quoted, fails here. Only the standard library and the report are needed (no benchmark
runs, no bench extra)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "results" / "latest.json"


@pytest.fixture(scope="module")
def quote() -> Any:
    """benchmarks/quote.py as a module (it imports its sibling plot.py)."""
    sys.path.append(str(ROOT / "benchmarks"))
    try:
        import quote as module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


@pytest.fixture
def report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(REPORT.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture
def pages(tmp_path: Path, quote: Any) -> Path:
    """A copy of the quoting pages, to edit."""
    for page in quote.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    return tmp_path


def _row(report: dict[str, Any], workload: str, case: str, label: str) -> dict[str, Any]:
    rows = report["workloads"][workload]["rows"]
    found: dict[str, Any] = next(r for r in rows if r["case"] == case and r["label"] == label)
    return found


def _check(quote: Any, *args: str) -> int:
    result: int = quote.main(["--check", *args])
    return result


def test_the_pages_quote_the_report() -> None:
    """What CI runs: the committed pages are what quote.py writes from the committed report."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "quote.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_quoting_needs_only_the_standard_library() -> None:
    """The check runs wherever the tests do: without site-packages (-S) and without
    PYTHONPATH (-E), quote.py still checks every page."""
    result = subprocess.run(
        [sys.executable, "-E", "-S", str(ROOT / "benchmarks" / "quote.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_figure_edited_by_hand_fails_the_check_until_requoted(
    quote: Any, pages: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    readme = pages / "README.md"
    text = readme.read_text(encoding="utf-8")
    # W1 N=16 with envs_per_worker=8, as the run measured it, and another row's figure.
    grouped = quote.steps(_row(report, "W1", "N=16", "aioenv process, 8 envs/worker"))
    other = quote.steps(_row(report, "W1", "N=16", "aioenv process x8 / batch"))
    assert f"{grouped} steps/s" in text
    readme.write_text(text.replace(f"{grouped} steps/s", f"{other} steps/s"), encoding="utf-8")

    assert _check(quote, "--root", str(pages)) == 1
    captured = capsys.readouterr()
    assert "-| cheap, async loop" in captured.out and other in captured.out
    assert "README.md" in captured.err

    assert quote.main(["--root", str(pages)]) == 0
    assert readme.read_text(encoding="utf-8") == text
    assert _check(quote, "--root", str(pages)) == 0


def test_a_new_report_fails_the_check_until_quoted(
    quote: Any, pages: Path, report: dict[str, Any], tmp_path: Path
) -> None:
    row = _row(report, "W1", "N=16", "aioenv process, 8 envs/worker")
    row["median"] = 12_345.0
    new = tmp_path / "new.json"
    new.write_text(json.dumps(report), encoding="utf-8")

    assert _check(quote, str(new), "--root", str(pages)) == 1
    assert quote.main([str(new), "--root", str(pages)]) == 0
    assert "12,345 steps/s" in (pages / "README.md").read_text(encoding="utf-8")
    assert _check(quote, str(new), "--root", str(pages)) == 0


def test_the_committed_report_is_one_full_run(quote: Any, report: dict[str, Any]) -> None:
    """Each quoting page names the run's command, commit and machine, and its blocks name
    no other commit."""
    meta = report["meta"]
    assert meta["scale"] == "full"
    commit = meta["git"]["commit"]
    source = f"`python benchmarks/run.py` at commit {commit} on a {meta['cpu_count']}-core"
    for page in quote.PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert source in text.replace("\n", " "), page
        blocks = "".join(match.group("body") for match in quote._BLOCK.finditer(text))
        assert set(re.findall(r"at commit (\w+)", blocks)) == {commit}, page


def _set(report: dict[str, Any], workload: str, case: str, medians: dict[str, float]) -> None:
    for label, median in medians.items():
        _row(report, workload, case, label)["median"] = median


@pytest.mark.parametrize("aioenv_faster", [False, True])
def test_a_faster_peer_is_named_and_the_advice_follows_the_figures(
    quote: Any, report: dict[str, Any], aioenv_faster: bool
) -> None:
    """Whichever way a run ranks two rows, the text ranks them the same way."""
    low, high = 1_000.0, 4_000.0
    aioenv, peer = (high, low) if aioenv_faster else (low, high)
    _set(report, "W1", "N=16", {"aioenv process, 8 envs/worker": aioenv, quote.SYNC: peer})
    _set(
        report,
        "W3",
        "210x160x3 N=8",
        {"aioenv process / state": aioenv, "aioenv sync / state": peer, quote.SYNC: peer},
    )
    _set(
        report,
        "W13",
        "Pong N=8 B=4",
        {quote.DEFAULT: peer, "AioVectorEnv pipelined: send/recv": aioenv},
    )
    _set(
        report,
        "W7",
        "N=1000",
        {
            "aioenv async / state": aioenv,
            "aioenv thread / state": low,
            "aioenv thread / batch": peer,
        },
    )
    text = quote.guide_modes(quote.Figures(report)) + quote.guide_costs(quote.Figures(report))

    if aioenv_faster:
        assert "`SyncVectorEnv` 0.25x as fast (1,000) |" in text
        assert '| large observations (images) | `mode="process"`, shared memory' in text
        assert "measured slower than the lockstep default" not in text
        assert "faster here" not in text
        assert "Even an env that costs nothing but its frame steps faster in processes" in text
    else:
        assert "`SyncVectorEnv` is 4.00x as fast (4,000) where the loop need not be async" in text
        assert "| large observations (images) | in-process when the step is cheap" in text
        assert "`recv`/`send`; measured slower than the lockstep default here" in text
        assert (
            "(4,000 with `get_batch`); no gymnasium rows (1,000 processes); `get_batch` threads faster here"
            in text
        )
        assert "An env that costs nothing but its frame still steps fastest in-process" in text


def test_a_busy_figure_keeps_its_mark(quote: Any, report: dict[str, Any]) -> None:
    for workload in report["workloads"].values():  # none busy but the one marked below
        for row in workload.get("rows", []):
            row["busy_reps"] = 0
    assert "*" not in quote.readme_modes(quote.Figures(report))
    row = _row(report, "W9", "N=8", "aioenv process / policy in parent")
    row.update(median=12_345.0, busy_reps=2)
    text = quote.readme_modes(quote.Figures(report))
    assert "12,345* with the policy in the parent" in text
    threshold = report["meta"]["busy_threshold_cores"]
    assert f"marked * were taken while other programs used more than {threshold:g} cores" in text
    row["busy_reps"] = 0
    assert "*" not in quote.readme_modes(quote.Figures(report))


def test_a_missing_or_skipped_row_is_an_error_that_changes_no_page(
    quote: Any, pages: Path, report: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    readme_before = (pages / "README.md").read_text(encoding="utf-8")
    skipped = copy.deepcopy(report)
    row = _row(skipped, "W11", "N=8 MLP", quote.ENVPOOL_PONG)
    row.pop("median")
    row["skipped"] = "EnvPool is not installed"
    partial = copy.deepcopy(report)
    del partial["workloads"]["W7"]
    quick = copy.deepcopy(report)
    quick["meta"]["scale"] = "quick"
    for bad, message in (
        (
            skipped,
            'W11 N=8 MLP "EnvPool Pong-v5 (EnvPool\'s own preprocessing)" has no '
            "figure: EnvPool is not installed",
        ),
        (partial, "the report has no W7"),
        (quick, "the report is a quick run"),
    ):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad), encoding="utf-8")
        assert quote.main([str(path), "--root", str(pages)]) == 2
        assert message in capsys.readouterr().err
        assert (pages / "README.md").read_text(encoding="utf-8") == readme_before


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda text: text.replace("figures: readme-modes", "figures: readme-mode"),
            "README.md: unknown block 'readme-mode'",
        ),
        (
            lambda text: text.replace("<!-- /figures -->", "", 1),
            "README.md: every `<!-- figures: NAME -->` needs its `<!-- /figures -->`",
        ),
    ],
)
def test_broken_markers_are_named(
    quote: Any, pages: Path, capsys: Any, edit: Any, message: str
) -> None:
    readme = pages / "README.md"
    readme.write_text(edit(readme.read_text(encoding="utf-8")), encoding="utf-8")
    assert _check(quote, "--root", str(pages)) == 2
    assert message in capsys.readouterr().err


def test_a_block_no_page_quotes_is_an_error(quote: Any, pages: Path, capsys: Any) -> None:
    guide = pages / "docs" / "guides" / "performance.md"
    text = guide.read_text(encoding="utf-8")
    start = text.index("<!-- figures: guide-costs -->")
    end = text.index("<!-- /figures -->", start) + len("<!-- /figures -->")
    guide.write_text(text[:start] + text[end:], encoding="utf-8")
    assert _check(quote, "--root", str(pages)) == 2
    assert "no page quotes guide-costs" in capsys.readouterr().err
