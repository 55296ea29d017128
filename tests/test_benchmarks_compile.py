"""Every benchmark script compiles under the Python the project supports (make bench runs them
only on request, so a syntax error would otherwise surface there first)."""

import py_compile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.rglob("*.py") if ".work" not in path.parts)


def test_there_are_benchmark_scripts():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(BENCHMARKS)))
def test_benchmark_script_compiles(script, tmp_path):
    py_compile.compile(str(script), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
