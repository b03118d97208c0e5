"""Every ```python block of the README and the docs runs as written, in a subprocess.

A block that cannot run here says so on the line before it, with a reason:
``<!-- no-run: needs a Ray cluster -->``; it must still compile.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
_NO_RUN = re.compile(r"<!-- no-run: (?P<reason>.*?) -->\s*$")


class Block(NamedTuple):
    where: str  # page:line, for the test id and the failure message
    code: str
    no_run: str | None  # the reason it is not run, or None


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _NO_RUN.search(before)
        found.append(
            Block(
                f"{page.relative_to(ROOT)}:{line}",
                match.group(1),
                marker.group("reason").strip() if marker else None,
            )
        )
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]
RUNNABLE = [block for block in BLOCKS if block.no_run is None]


def test_the_readme_and_every_guide_have_examples() -> None:
    pages_with_blocks = {block.where.split(":")[0] for block in RUNNABLE}
    assert "README.md" in pages_with_blocks
    assert any(page.startswith("docs/guides/") for page in pages_with_blocks)
    assert any(page.startswith("docs/migration/") for page in pages_with_blocks)
    assert len(RUNNABLE) >= 15


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_block_compiles_and_a_skipped_one_says_why(block: Block) -> None:
    compile(block.code, block.where, "exec")
    if block.no_run is not None:
        assert len(block.no_run) > 10, f"{block.where}: say why the block does not run"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.where for block in RUNNABLE])
def test_block_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, f"{block.where}:\n{result.stderr}"


def test_the_readme_is_short_and_its_install_section_explains_every_extra() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    install = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install . " in install
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras_table = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = re.findall(r"^([\w-]+) = \[", extras_table, re.M)
    assert extras, "no extras found in pyproject.toml"
    for extra in extras:
        line = next((line for line in install.splitlines() if f'".[{extra}]"' in line), "")
        assert "#" in line, f"the README's install section does not explain the {extra} extra"
