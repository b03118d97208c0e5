"""The README's runnable examples run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [
    block
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    if 'if __name__ == "__main__":' in block
]


def test_the_readme_has_runnable_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"example_{index}.py"
    script.write_text(EXAMPLES[index])
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
