"""Quiet by default (issue 38): correct paths print no third-party noise, write nothing beside the inputs,
and leave no stray files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _cli_fixtures  # noqa: E402

NOISE = ("without encryption", "netCDF", "Alternative text", "clamping frac", "Traceback")


def _mdbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "mdbench"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=900,
                          env=dict(os.environ, PYTHONWARNINGS="default"))


@pytest.mark.gromacs
def test_analyze_files_writes_nothing_beside_the_inputs(tmp_path_factory, tmp_path: Path) -> None:
    micro = _cli_fixtures.micro_dirs(tmp_path_factory)
    before = sorted(p.name for p in micro["prod"].iterdir())
    proc = _mdbench("analyze-files", "--tpr", str(micro["prod"] / "prod.tpr"), "--xtc", str(micro["prod"] / "prod.xtc"),
                    "--edr", str(micro["prod"] / "prod.edr"), "--out", "out", "--no-progress", "--no-figures",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "results.json").is_file()  # a relative --out is relative to the working directory
    assert sorted(p.name for p in micro["prod"].iterdir()) == before  # no .prod.xtc_offsets.npz / .lock
    for word in NOISE:
        assert word not in proc.stderr, proc.stderr


@pytest.mark.gromacs
def test_audit_prints_no_library_warnings(tmp_path_factory, tmp_path: Path) -> None:
    micro = _cli_fixtures.micro_dirs(tmp_path_factory)
    proc = _mdbench("audit", str(micro["run"]), "--bundle", str(micro["bundle"]), "--out", "a", "--no-reanalysis",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in NOISE:
        assert word not in proc.stderr, proc.stderr


def test_kernel_start_is_quiet(tmp_path: Path) -> None:
    """A stage notebook run prints no kernel log (the TCP-encryption warning of every start)."""
    proc = _mdbench("run-template", "selftest/01_echo", "--run-dir", "r", "--system", "X", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in NOISE:
        assert word not in proc.stderr + proc.stdout, proc.stderr
