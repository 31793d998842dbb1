"""A run directory that names a case so that the audit's own output would land outside its output folder.

The audit writes each case's canonical reanalysis into ``<out>/reanalysis/<case>``. A case name comes from the
run's record (stage states, observables, the attempts ledger), which the agent wrote: ``../../x`` or an
absolute path must not place links, results or deletions anywhere but inside ``<out>``. The attacker adds a
completed production attempt under such a name whose artifacts are the run's real (valid) production files,
and plants decoy files where the escaped folder would be.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mdbench.audit import audit_run, reanalysis

pytestmark = pytest.mark.gromacs


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) → its sha256, or the link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(root))] = "-> " + os.readlink(p)
            elif p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _plant_case(run: Path, name: str) -> None:
    """A completed production attempt of case ``name`` whose artifacts are case W's real production files."""
    path = run / "run_record" / "attempts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    prod = next(r for r in rows if r.get("kind") == "production" and r.get("status") == "completed")
    evil = dict(prod, case=name, id=f"X-{len(rows)}", parent=None, relation=None, event_id=prod["event_id"])
    path.write_text(path.read_text() + json.dumps(evil, sort_keys=True, separators=(",", ":")) + "\n")


@pytest.mark.parametrize("serial", [True, False], ids=["one-process", "shared-with-child"])
def test_case_names_that_climb_or_are_absolute_keep_the_reanalysis_inside_the_output_folder(
        run_copy, built, tmp_path, monkeypatch, serial):
    import shutil
    import tempfile

    victim = Path(tempfile.mkdtemp(prefix="v", dir="/tmp"))             # short: case names stop at 63 characters
    request_cleanup = lambda: shutil.rmtree(victim, ignore_errors=True)  # noqa: E731
    (victim / "inputs").mkdir(parents=True)
    for name in ("prod.tpr", "prod.xtc", "prod.edr", "results.json"):
        (victim / name).write_text("precious\n")
        (victim / "inputs" / name).write_text("precious\n")
    out = tmp_path / "audits" / "a"
    names = [str(victim), os.path.relpath(victim, out / "reanalysis")]   # absolute, and climbing from <out>
    for n in names:
        assert len(n) < 64, n    # the audit reads case names up to 63 characters
        _plant_case(run_copy, n)
    before = _tree(victim)
    if serial:
        monkeypatch.setenv(reanalysis.SERIAL_ENV, "1")
    else:
        monkeypatch.setattr(reanalysis, "_can_fork", lambda: True)
    try:
        res = audit_run(run_copy, built[1], out, reanalysis=True)
        after = _tree(victim)
    finally:
        request_cleanup()
    assert after == before                                    # nothing written, linked or deleted there
    assert set(os.listdir(tmp_path / "audits")) == {"a"}              # nothing beside the output folder
    for n in names:
        assert n in res.cases
        info = res.reanalysis["cases"][n]
        assert info["status"] == "ok", info                           # the attack reached the reanalysis ...
        assert (out / info["out"]).resolve().is_relative_to((out / "reanalysis").resolve()), info  # ... inside
