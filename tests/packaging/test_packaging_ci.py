"""README's test command is the one .ci/run runs, and the `build` tests it leaves out still run in CI."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("python3 -m venv") and "pytest" in ln]
    assert len(lines) == 1, lines
    return lines[0]


def _ci_lines() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def test_ci_runs_readme_test_command_verbatim():
    assert _readme_test_command() in _ci_lines()


def test_tests_left_out_of_readme_command_run_in_ci():
    """Every marker README's command deselects (``-m 'not X'``) has a CI line that selects it."""
    left_out = re.findall(r"-m '?not (\w+)'?", _readme_test_command())
    assert left_out, "README's command deselects nothing: drop this test with the marker"
    for marker in left_out:
        assert any(re.search(rf"pytest .*-m '?{marker}'?(\s|$)", ln) for ln in _ci_lines()), marker


def test_build_marker_is_declared_and_used():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"build: ', text)
    used = [p for p in (ROOT / "tests").rglob("test_*.py") if "@pytest.mark.build" in p.read_text(encoding="utf-8")]
    assert used, "no test carries the build marker"

