"""The bad-input table (issue 38): every bad input a newcomer tried gets ONE line naming the file or value
(and what to do), a non-zero exit, no traceback, and leaves the run record as it was.

The CLI runs in-process through :func:`mdbench.cli.main` (the console entry point), so an escaping exception
fails the test as the traceback a user would have seen; ``test_an_escaping_oserror_is_one_line`` checks the
same through a real subprocess. The run directory is the tiny REAL GROMACS run of the audit tests.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _cli_fixtures  # noqa: E402
from _cli_fixtures import rb  # noqa: E402


@pytest.fixture
def micro(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The session's micro run, bundle and audit (tests/_cli_fixtures.py)."""
    return _cli_fixtures.micro_dirs(tmp_path_factory)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture, cwd: Path) -> tuple[int, str, str]:
    """Run ``mdbench ARGV`` in-process as the console script does; an escaping exception fails the test."""
    import os

    from mdbench.cli import main

    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = ["mdbench", *argv]
    os.chdir(cwd)
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # what a user would see as a traceback
        pytest.fail(f"mdbench {' '.join(argv)} raised {type(exc).__name__}: {exc} (a traceback for the user)")
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(run: Path) -> dict[str, str]:
    """sha256 of every file under run_record/ (absent folder: empty)."""
    rec = run / "run_record"
    if not rec.is_dir():
        return {}
    return {str(p.relative_to(rec)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(rec.rglob("*")) if p.is_file() and p.name != ".lock"}


@dataclass
class Bad:
    """One row of the table: how to make the input, the command, and the words its one line must hold."""

    name: str
    make: Callable[[dict[str, Path], Path], list[str]]  # (fixtures, tmp) -> argv
    names: Callable[[dict[str, Path], Path], list[str]]  # words the error line must contain
    usable: bool = False  # a usable input: exit 0 allowed, but a warning line is required
    run_untouched: bool = True
    env: dict[str, str] = field(default_factory=dict)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _plan(tmp: Path, text: str) -> list[str]:
    return ["batch", str(_write(tmp / "plan.yaml", text)), "--quiet"]


def _truncated(edr: Path, dst: Path) -> Path:
    """The first fifth of an energy file, cut mid-frame (a writer killed, a copy interrupted)."""
    data = edr.read_bytes()
    dst.write_bytes(data[: len(data) // 5 + 37])
    return dst


def _garbage_xtc_run(f: dict[str, Path], tmp: Path) -> Path:
    """A copy of the micro run whose production trajectory is seeded random bytes."""
    import random
    import shutil

    from _testseed import seed_for

    run = tmp / "run"
    shutil.copytree(f["run"], run, symlinks=True)
    rng = random.Random(seed_for("garbage-xtc"))
    (run / "cases" / rb.CASE / "prod" / "prod.xtc").write_bytes(bytes(rng.getrandbits(8) for _ in range(20_000)))
    return run


def _file(tmp: Path) -> Path:
    return _write(tmp / "afile", "I am a file, not a folder\n")


TABLE = [
    Bad("batch-plan-is-a-list", lambda f, t: _plan(t, "- DE\n- HCE\n"), lambda f, t: ["plan.yaml", "mapping"]),
    Bad("batch-plan-is-a-string", lambda f, t: _plan(t, "just words\n"), lambda f, t: ["plan.yaml"]),
    Bad("batch-plan-jobs-not-a-list", lambda f, t: _plan(t, "jobs: {a: 1}\n"), lambda f, t: ["plan.yaml", "jobs"]),
    Bad("batch-plan-systems-a-string",
        lambda f, t: _plan(t, "run_dir: r\nsystems: DE\nstages: [study/10_setup]\nparams: {preset: micro}\n"),
        lambda f, t: ["plan.yaml", "systems", "list"]),
    Bad("batch-plan-misspelt-param",
        lambda f, t: _plan(t, "run_dir: r\nsystems: [DE]\nstages: [study/10_setup]\nparams: {preest: tiny}\n"),
        lambda f, t: ["plan.yaml", "preest"]),
    Bad("batch-plan-unknown-preset",
        lambda f, t: _plan(t, "run_dir: r\nsystems: [DE]\nstages: [study/10_setup]\nparams: {preset: huge}\n"),
        lambda f, t: ["huge", "micro"]),
    Bad("batch-plan-stage-params-unknown-stage",
        lambda f, t: _plan(t, "run_dir: r\nsystems: [DE]\nstages: [study/10_setup]\n"
                              "stage_params: {study/10_setup_typo: {seed: 1}}\n"),
        lambda f, t: ["plan.yaml", "10_setup_typo"]),
    Bad("params-file-is-a-list",
        lambda f, t: ["run-template", "study/10_setup", "--run-dir", str(t / "r"), "--system", "DE",
                      "--params-file", str(_write(t / "p.yaml", "- preset\n- micro\n"))],
        lambda f, t: ["p.yaml", "mapping"]),
    Bad("run-template-unknown-preset",
        lambda f, t: ["run-template", "study/10_setup", "--run-dir", str(t / "r"), "--system", "DE",
                      "-p", "preset=huge"],
        lambda f, t: ["huge", "micro"]),
    Bad("bundle-build-out-under-a-file",
        lambda f, t: ["bundle", "build", "--preset", "micro", "--out", str(_file(t) / "b")],
        lambda f, t: [str(t / "afile")]),
    Bad("analyze-files-out-under-a-file",
        lambda f, t: ["analyze-files", "--tpr", str(f["prod"] / "prod.tpr"), "--xtc", str(f["prod"] / "prod.xtc"),
                      "--edr", str(f["prod"] / "prod.edr"), "--out", str(_file(t) / "o"), "--no-progress"],
        lambda f, t: [str(t / "afile")]),
    Bad("audit-out-under-a-file",
        lambda f, t: ["audit", str(f["run"]), "--bundle", str(f["bundle"]), "--out", str(_file(t) / "a"),
                      "--no-reanalysis"],
        lambda f, t: [str(t / "afile")]),
    Bad("report-out-under-a-file",
        lambda f, t: ["report", str(f["audit"]), "--out", str(_file(t) / "r.html")],
        lambda f, t: [str(t / "afile")]),
    Bad("study-run-out-under-a-file",
        lambda f, t: ["study", "run", "--preset", "micro", "--systems", "DE", "--out", str(_file(t) / "run"),
                      "--no-analysis"],
        lambda f, t: [str(t / "afile")]),
    Bad("analyze-unknown-case",
        lambda f, t: ["analyze", str(f["run"]), "--case", "XYZ", "--no-progress"],
        lambda f, t: ["XYZ", rb.CASE]),
    Bad("analyze-unknown-preset",
        lambda f, t: ["analyze", str(f["run"]), "--preset", "huge", "--no-progress"],
        lambda f, t: ["huge", "micro"]),
    Bad("analyze-files-unknown-preset",
        lambda f, t: ["analyze-files", "--tpr", str(f["prod"] / "prod.tpr"), "--xtc", str(f["prod"] / "prod.xtc"),
                      "--edr", str(f["prod"] / "prod.edr"), "--out", str(t / "o"), "--preset", "huge"],
        lambda f, t: ["huge", "micro"]),
    Bad("analyze-files-text-as-tpr",
        lambda f, t: ["analyze-files", "--tpr", str(_write(t / "notes.tpr", "not a run input\n")),
                      "--xtc", str(f["prod"] / "prod.xtc"), "--edr", str(f["prod"] / "prod.edr"),
                      "--out", str(t / "o"), "--no-progress"],
        lambda f, t: [str(t / "notes.tpr")]),
    Bad("analyze-files-atom-count-mismatch",
        lambda f, t: ["analyze-files", "--tpr", str(f["prod"] / "prod.tpr"), "--xtc", str(f["water_xtc"]),
                      "--edr", str(f["prod"] / "prod.edr"), "--out", str(t / "o"), "--no-progress"],
        lambda f, t: ["water_only.xtc", "prod.tpr", "624", "632"]),
    Bad("analyze-files-truncated-edr",
        lambda f, t: ["analyze-files", "--tpr", str(f["prod"] / "prod.tpr"), "--xtc", str(f["prod"] / "prod.xtc"),
                      "--edr", str(_truncated(f["prod"] / "prod.edr", t / "cut.edr")), "--out", str(t / "o"),
                      "--no-progress", "--no-figures"],
        lambda f, t: [str(t / "cut.edr")], usable=True),
    Bad("audit-not-a-run-directory",
        lambda f, t: ["audit", str(_write(t / "etc" / "hosts", "127.0.0.1 localhost\n").parent),
                      "--out", str(t / "a"), "--no-reanalysis"],
        lambda f, t: [str(t / "etc"), "run_record", "--force"]),
    Bad("audit-garbage-production-xtc",
        lambda f, t: ["audit", str(_garbage_xtc_run(f, t)), "--bundle", str(f["bundle"]), "--out", str(t / "a"),
                      "--no-reanalysis"],
        lambda f, t: [str(t / "run" / "cases" / rb.CASE / "prod" / "prod.xtc"), "unreadable"], usable=True),
    Bad("audit-missing-bundle",
        lambda f, t: ["audit", str(f["run"]), "--bundle", str(t / "nonexistent"), "--out", str(t / "a"),
                      "--no-reanalysis"],
        lambda f, t: [str(t / "nonexistent")]),
    Bad("record-budget-empty-folder",
        lambda f, t: ["record", "budget", str((t / "empty").mkdir() or t / "empty")],
        lambda f, t: [str(t / "empty"), "run_record"]),
    Bad("record-validate-empty-folder",
        lambda f, t: ["record", "validate", str((t / "empty").mkdir() or t / "empty")],
        lambda f, t: [str(t / "empty"), "run_record"]),
    Bad("unreachable-dask-scheduler",
        lambda f, t: _plan(t, f"run_dir: {t / 'r'}\nsystems: [DE]\nstages: [study/10_setup]\n"
                              "params: {preset: micro}\n") + ["--executor", "dask", "--scheduler",
                                                              "tcp://127.0.0.1:9"],
        lambda f, t: ["tcp://127.0.0.1:9"], env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}),
]


@pytest.mark.gromacs
@pytest.mark.parametrize("bad", TABLE, ids=[b.name for b in TABLE])
def test_bad_input_is_one_clear_line(bad: Bad, micro: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in bad.env.items():
        monkeypatch.setenv(key, value)
    if bad.env:
        import dask

        monkeypatch.setattr(dask.config, "config", dask.config.config)  # restored after the test
        dask.config.refresh()
    before = snapshot(micro["run"])
    argv = bad.make(micro, tmp_path)
    code, out, err = run_cli(argv, capsys, tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in out + err
    if not bad.usable:
        assert code != 0, f"accepted silently: {out}{err}"
    assert lines, f"no message on stderr (exit {code}): {out}"
    message = lines[-1]
    if bad.usable and code == 0:  # a usable input: exactly one warning line says what was only partly used
        assert len([ln for ln in lines if ln.startswith("warning")]) == 1, err
        message = next(ln for ln in lines if ln.startswith("warning"))
    else:
        assert len([ln for ln in lines if ln.startswith(("error", "Error"))]) == 1, err
    for word in bad.names(micro, tmp_path):
        assert word in message, f"{word!r} not named in: {message}"
    if bad.run_untouched:
        assert snapshot(micro["run"]) == before, "the run record changed"
    assert not (tmp_path / "r" / "run_record").exists(), "a run record was started for a refused plan"


@pytest.mark.gromacs
def test_record_budget_does_not_create_a_record(micro: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    run_cli(["record", "budget", str(tmp_path / "empty")], capsys, tmp_path)
    assert list((tmp_path / "empty").iterdir()) == []


def test_bundle_build_defaults_to_tiny() -> None:
    from mdbench.inputs.commands import build_cmd

    preset = next(p for p in build_cmd.params if p.name == "preset")
    assert preset.default == "tiny"


def test_an_escaping_oserror_is_one_line(tmp_path: Path) -> None:
    """A real subprocess: an OSError no command caught (writing under a file) is one line naming the path."""
    blocker = _file(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "mdbench", "bundle", "build", "--preset", "micro", "--out",
                           str(blocker / "sub")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(blocker) in lines[0], proc.stderr


def test_default_output_paths_are_relative_to_the_working_directory() -> None:
    """`arena oracle --jobs-dir` writes under the working directory, not inside the checkout."""
    from mdbench.arena.commands import arena

    oracle = arena.get_command(None, "oracle")
    jobs_dir = next(p for p in oracle.params if p.name == "jobs_dir")
    assert not Path(jobs_dir.default).is_absolute()
