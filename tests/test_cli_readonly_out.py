"""An unwritable ``--out`` on a READ-ONLY file system (issue 38): one line naming the path, exit != 0, no
traceback — for every command that writes an output folder or page, and for ``analyze`` on a read-only run.

The tests run as root, where ``chmod`` stops nothing; the read-only file system is real instead: each command
runs in its own mount namespace (``unshare -m``) with a tmpfs mounted ``ro`` over the output's parent (and,
for ``analyze``, the run directory bind-mounted read-only onto itself). The path-under-a-regular-file case of
the same commands is in ``test_cli_bad_inputs.py``.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _cli_fixtures  # noqa: E402


def _can_mount_readonly(tmp: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp / "probe"
    probe.mkdir(exist_ok=True)
    proc = subprocess.run(["unshare", "-m", "sh", "-c",
                           f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(probe))} && "
                           f"! touch {shlex.quote(str(probe / 'x'))} 2>/dev/null"],
                          capture_output=True, text=True)
    return proc.returncode == 0


def _run_readonly(argv: list[str], ro_dir: Path, *, ro_bind: Path | None = None,
                  cwd: Path) -> subprocess.CompletedProcess:
    """``python -m mdbench ARGV`` with ``ro_dir`` a read-only tmpfs (and ``ro_bind`` read-only) in a private
    mount namespace."""
    ro_dir.mkdir(parents=True, exist_ok=True)
    mounts = [f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(ro_dir))}"]
    if ro_bind is not None:
        mounts.append(f"mount --bind -o ro {shlex.quote(str(ro_bind))} {shlex.quote(str(ro_bind))}")
    script = " && ".join(mounts) + " && exec " + shlex.join([sys.executable, "-m", "mdbench", *argv])
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture
def micro(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _cli_fixtures.micro_dirs(tmp_path_factory)


def _prod_args(f: dict[str, Path]) -> list[str]:
    prod = f["prod"]
    return ["--tpr", str(prod / "prod.tpr"), "--xtc", str(prod / "prod.xtc"), "--edr", str(prod / "prod.edr")]


# (id, argv from (fixtures, read-only dir), the path the line must name)
CASES = [
    ("bundle-build", lambda f, ro: ["bundle", "build", "--preset", "micro", "--out", str(ro / "b")], "b"),
    ("analyze-files", lambda f, ro: ["analyze-files", *_prod_args(f), "--out", str(ro / "o"), "--no-progress"], "o"),
    ("audit", lambda f, ro: ["audit", str(f["run"]), "--bundle", str(f["bundle"]), "--out", str(ro / "a"),
                             "--no-reanalysis"], "a"),
    ("report", lambda f, ro: ["report", str(f["audit"]), "--out", str(ro / "r.html")], "r.html"),
    ("report-keep-notebook", lambda f, ro: ["report", str(f["audit"]), "--out", str(ro.parent / "w" / "r.html"),
                                            "--keep-notebook", str(ro / "r.ipynb")], "r.ipynb"),
    ("study-run", lambda f, ro: ["study", "run", "--preset", "micro", "--systems", "DE", "--out", str(ro / "run"),
                                 "--no-analysis"], "run"),
]


@pytest.mark.gromacs
@pytest.mark.parametrize("name,make,named", CASES, ids=[c[0] for c in CASES])
def test_out_on_a_readonly_file_system_is_one_line(name: str, make, named: str, micro: dict[str, Path],
                                                   tmp_path: Path) -> None:
    if not _can_mount_readonly(tmp_path):
        pytest.skip("needs unshare -m and mount (root in a private mount namespace)")
    ro = tmp_path / "ro"
    proc = _run_readonly(make(micro, ro), ro, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(lines) == 1, proc.stderr
    assert str(ro / named) in lines[0] and "read-only" in lines[0].lower(), lines[0]
    assert not (tmp_path / "w" / "r.html").exists(), "the page was written although its notebook could not be"


def _record_digest(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((run / "run_record").rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.gromacs
def test_analyze_on_a_readonly_run_directory_is_one_line(micro: dict[str, Path], tmp_path: Path) -> None:
    if not _can_mount_readonly(tmp_path):
        pytest.skip("needs unshare -m and mount (root in a private mount namespace)")
    run = tmp_path / "run"
    shutil.copytree(micro["run"], run, symlinks=True)
    before = _record_digest(run)
    proc = _run_readonly(["analyze", str(run), "--no-progress"], tmp_path / "ro", ro_bind=run, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(lines) == 1 and str(run) in lines[0] and "read-only" in lines[0].lower(), proc.stderr
    assert _record_digest(run) == before
