"""Preparing an episode (byte-identical, read-only inputs), the integrity check, and reading what an episode cost."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from mdbench.episode import collect
from mdbench.episode.workspace import (Limits, check_integrity, load_episode, parse_config, prepare_episode)
from mdbench.errors import InputError

from _episode_helpers import mdbench

HARBOR_DATA = Path("/work/shared/data/harbor/15735640198__harbor/archived-jobs/failed-claw-family-jobs")


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Relative path → (mode, sha256 or 'dir') of every entry."""
    out = {}
    for p in sorted(root.rglob("*")):
        mode = stat.S_IMODE(p.lstat().st_mode)
        out[p.relative_to(root).as_posix()] = (mode, "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_prepare_is_byte_identical_and_read_only(tmp_path):
    a = prepare_episode("micro", tmp_path / "a", {"harness": "codex", "model": "gpt", "repeat": 2})
    b = prepare_episode("micro", tmp_path / "b", {"harness": "codex", "model": "gpt", "repeat": 2})
    assert _tree(a.root) == _tree(b.root)
    doc = json.loads((a.root / "episode.json").read_text())
    assert doc["episode_id"] == a.episode_id and a.episode_id.startswith("codex__gpt__r2__micro-")
    assert doc["configuration"] == {"harness": "codex", "model": "gpt", "repeat": 2}
    assert doc["limits"]["md_budget_ns_per_case"] == 100.0 and doc["limits"]["cpu_threads_max"] == 16
    assert str(tmp_path) not in (a.root / "episode.json").read_text()  # no absolute paths
    assert set(doc["software"]) >= {"mdbench", "python", "gromacs", "packmol"}
    # the bundle sha256 binds the episode to the checksum list the agent gets
    listing = (a.agent_input / "bundle_checksums.sha256").read_bytes()
    assert doc["bundle"]["sha256"] == hashlib.sha256(listing).hexdigest()
    assert (a.prompt.read_bytes() == (a.agent_input / "PROMPT_TEMPLATE.md").read_bytes())
    for p in [a.agent_input, *a.agent_input.rglob("*")]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o555 if p.is_dir() else 0o444), p
    assert stat.S_IMODE(a.prompt.stat().st_mode) == 0o444
    other = prepare_episode("micro", tmp_path / "c", {"harness": "codex", "model": "gpt", "repeat": 3})
    assert other.episode_id != a.episode_id and other.bundle_sha256 == a.bundle_sha256


def test_prepare_cli_takes_the_issue_syntax_and_refuses_a_used_folder(tmp_path):
    res = mdbench("episode", "prepare", "--preset", "micro", "--out", str(tmp_path / "ep"), "--config",
                  "harness=opencode", "model=glm", "repeat=2")
    assert res.returncode == 0, res.stderr
    assert load_episode(tmp_path / "ep").configuration == {"harness": "opencode", "model": "glm", "repeat": 2}
    again = mdbench("episode", "prepare", "--preset", "micro", "--out", str(tmp_path / "ep"))
    assert again.returncode == 1 and "episode folder exists and is not empty" in again.stderr
    assert "Traceback" not in again.stderr and str(tmp_path / "ep") in again.stderr


@pytest.mark.parametrize("pairs, message", [(["harness"], "KEY=VALUE"), (["repeat=0"], "positive integer"),
                                            (["repeat=two"], "positive integer")])
def test_bad_configuration_is_refused(pairs, message):
    with pytest.raises(InputError, match=message):
        parse_config(pairs)


def test_not_an_episode_folder(tmp_path):
    res = mdbench("episode", "run", str(tmp_path), "--agent", "null")
    assert res.returncode == 1 and "not an episode folder" in res.stderr and "Traceback" not in res.stderr


def test_integrity_check_names_every_change_and_keeps_the_evidence(tmp_path):
    ep = prepare_episode("micro", tmp_path / "ep", limits=Limits(timeout_min=1))
    assert check_integrity(ep) == {"intact": True, "findings": [], "checked_files": 27}  # with the state-graph schema
    ai = ep.agent_input
    for p in (ai, ai / "cases", ai / "references"):  # root bypasses the modes; the mount is what stops agents
        os.chmod(p, 0o755)
    os.chmod(ai / "cases" / "DE.yaml", 0o644)
    (ai / "cases" / "DE.yaml").write_text("molecules: {}\n")
    (ai / "references" / "ESTIMATORS.md").unlink()
    (ai / "notes.txt").write_text("scratch\n")
    (ai / "cases" / "link.yaml").symlink_to("/etc/passwd")
    res = check_integrity(ep)
    assert not res["intact"]
    f = set(res["findings"])
    assert {"changed: cases/DE.yaml", "missing: references/ESTIMATORS.md", "extra: notes.txt",
            "extra: cases/link.yaml"} <= f
    assert any(x.startswith("mode: agent_input/") for x in f)
    ev = json.loads((ep.root / res["evidence"]).read_text())
    assert (ep.root / ev["files"]["cases/DE.yaml"]["copy"]).read_text() == "molecules: {}\n"
    assert ev["files"]["cases/link.yaml"] == {"kind": "symlink", "target": "/etc/passwd"}  # not followed


def test_ledger_costs_and_gpu_hours_are_read_defensively(tmp_path):
    ws = tmp_path / "ws"
    (ws / "run_record").mkdir(parents=True)
    rows = [{"id": "DE-0001", "case": "DE", "ns_charged": 0.0, "status": "reserved"},
            {"id": "DE-0001", "case": "DE", "ns_charged": 0.01, "status": "completed"},
            {"id": "HCE-0001", "case": "HCE", "ns_charged": 0.04, "status": "completed"},
            {"id": "HCE-0002", "case": "HCE", "ns_charged": float("nan")}]
    (ws / "run_record" / "attempts.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    led = collect.ns_charged(ws)
    assert led["per_case_ns"] == {"DE": 0.01, "HCE": 0.04} and led["total_ns"] == pytest.approx(0.05)
    # the NaN row is not JSON for the hardened reader: refused with the line that is not JSON at all
    assert led["attempts"] == 2 and "2 malformed" in led["note"] and led["label"] == "self_reported"
    assert [f["code"] for f in led["findings"]] == ["ledger_malformed_lines"]
    (ws / "cost.json").write_text(json.dumps({"tokens": {"prompt": 1000, "completion": 250}, "usd": 0.42}))
    c = collect.agent_costs(ws)
    assert (c["total_tokens"], c["usd"], c["source"], c["reported_by"]) == (1250, 0.42, "cost.json", "agent")
    (ws / "cost.json").unlink()
    (ws / "cost.json").symlink_to("/etc/hostname")  # an agent pointing the evaluator elsewhere
    c = collect.agent_costs(ws)
    assert c["source"] is None and [f["code"] for f in c["findings"]] == ["refused_symlink"]
    elsewhere = tmp_path / "evaluator"
    (elsewhere).mkdir()
    (elsewhere / "cost.json").write_text(json.dumps({"usd": 99.0, "agent": "secret"}))
    (ws / "run_record" / "cost.json").unlink(missing_ok=True)
    os.rename(ws / "run_record", tmp_path / "rr")
    (ws / "run_record").symlink_to(elsewhere)  # a folder link: the evaluator's files must not be read
    assert collect.agent_costs(ws)["source"] is None and collect.ns_charged(ws)["total_ns"] is None
    log = ws / "cases" / "DE" / "prod" / "prod.log"
    log.parent.mkdir(parents=True)
    log.write_text("On host x 1 GPU selected for this run.\n...\n               Core t (s)   Wall t (s)        (%)\n"
                   "       Time:     7200.000     3600.000      200.0\n")
    assert collect.gpu_hours(ws)["gpu_hours"] == pytest.approx(1.0)


@pytest.mark.skipif(not HARBOR_DATA.is_dir(), reason="real Harbor outputs not available (/work/shared/data)")
def test_tokens_from_a_real_harbor_atif_trajectory(tmp_path):
    src = HARBOR_DATA / "pinchbench-147-kimi2.6" / "task-calendar__8A83BnJ" / "agent" / "trajectory.json"
    shutil.copy(src, tmp_path / "trajectory.json")
    c = collect.agent_costs(tmp_path)
    # final_metrics of that trial: 1160 prompt, 424 completion, 45056 cached tokens; no cost recorded
    assert (c["prompt_tokens"], c["completion_tokens"], c["cached_tokens"]) == (1160, 424, 45056)
    assert c["total_tokens"] == 1584 and c["format"] == "ATIF-v1.7" and c["agent"] == "openclaw"
    assert c["usd"] == 0.0  # steps carry cost_usd 0.0
