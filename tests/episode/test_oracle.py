"""The oracle agent on the micro preset through ``mdbench episode run`` (real GROMACS, all three cases), and
the scripted defects of seed §4.3 landing on the items the seed names.

The oracle episode is made once per session (conftest.py); it takes ~8 min on an idle 2-core machine and up to
25 min under load, so these tests are ``slow`` (``make test-slow``, or ``pytest -m slow tests/episode``).
"""

from __future__ import annotations

import json

import pytest

from mdbench.audit import audit_run
from mdbench.episode.defects import DEFECTS
from mdbench.episode.harbor import write_harbor_task

from _episode_helpers import ORACLE_TIMEOUT_MIN, run_verifier, saeo

pytestmark = [pytest.mark.slow, pytest.mark.gromacs, pytest.mark.timeout(ORACLE_TIMEOUT_MIN * 60 + 1800)]


def test_oracle_audit_has_no_F_or_M_and_equals_the_direct_audit(oracle_episode, tmp_path):
    result = json.loads((oracle_episode / "result.json").read_text())
    assert result["status"] == "completed", (oracle_episode / "agent" / "stderr.log").read_text()[-3000:]
    doc = saeo(oracle_episode)
    states = {o["state"] for o in doc["observables"]}
    assert not states & {"F", "M"}, [(o["case"], o["observable"], o["state"], o["reason"])
                                     for o in doc["observables"] if o["state"] in ("F", "M")]
    assert doc["claimed_outcome"] == doc["expected_outcome"], "the oracle's claim must match its evidence"
    # SI is allowed (micro trajectories are short); definitions, implementation, evidence and claim are not
    assert all(doc["items"][i]["final"] == 1.0 for i in ("A2", "A3", "E1", "E2", "E3", "E4", "E5", "O2", "O5")), {
        i: (v["final"], v["reason"][:120]) for i, v in doc["items"].items() if v["final"] < 1}
    # the same run directory audited directly gives the same score
    direct = audit_run(oracle_episode / "workspace", oracle_episode / "bundle", tmp_path / "direct")
    assert result["score"] == pytest.approx(direct.composite_final, abs=1e-3)
    assert {i: s.final for i, s in direct.episode_items.items()} == result["audit"]["items"]
    # inputs untouched; the oracle read its cases and force field from agent_input/
    bundle_files = len((oracle_episode / "bundle" / "bundle_checksums.sha256").read_text().splitlines())
    # every listed file, the checksum list itself and PROMPT.md
    assert result["agent_input_intact"] and result["input_integrity"]["checked_files"] == bundle_files + 2
    for case in ("DE", "HCE", "LHCE"):
        build = json.loads((oracle_episode / "workspace" / "cases" / case / "setup" / "build.json").read_text())
        assert build["inputs"]["bundle"] == str((oracle_episode / "workspace" / "agent_input").resolve())
    # resources and cost recorded from the evaluator's side and the agent's ledger
    ledger = result["ledger"]
    assert 0 < result["ns_charged"] <= 300 and set(ledger["per_case_ns"]) == {"DE", "HCE", "LHCE"}
    assert all(v <= 100 for v in ledger["per_case_ns"].values())
    assert result["cpu_s"] > 0 and result["peak_memory_mib"] > 0 and result["wall_s"] > 0
    assert (result["tokens"], result["cost_usd"], result["cost"]["source"]) == (0, 0.0, "cost.json")
    assert result["gpu_hours"] == 0.0 and result["limits"]["threads"] == 2
    assert result["isolation"]["isolation"] == "namespaces"


@pytest.mark.parametrize("kind", sorted(DEFECTS))
def test_each_buggy_kind_lands_on_the_item_the_seed_names(buggy_episodes, oracle_episode, kind):
    result = json.loads((buggy_episodes[kind] / "result.json").read_text())
    assert result["status"] == "completed", (buggy_episodes[kind] / "agent" / "stderr.log").read_text()[-2000:]
    doc = saeo(buggy_episodes[kind])
    items = {i: v["final"] for i, v in doc["items"].items()}
    oracle = saeo(oracle_episode)
    for item, rating in DEFECTS[kind].expected_items.items():
        assert items[item] == rating, (kind, item, doc["items"][item]["reason"])
        assert oracle["items"][item]["final"] > rating, f"{item} fails in the oracle too: not the defect's doing"
    st = {(o["case"], o["observable"]): o["state"] for o in doc["observables"]}
    if kind == "tplus_convention":  # a definition error, not sampling: F wherever L+- makes the formulas differ
        assert [c for c in ("DE", "HCE", "LHCE") if st[(c, "transference_number")] == "F"]
        # the finding's code, not the item's wording (the reason is shortened where several cases add to it)
        assert "tplus_mixed_convention" in {f["code"] for f in doc["findings"]}, doc["items"]["A2"]["reason"]
        assert items["O2"] == 0.0  # the F was labelled SI / C by the agent
    elif kind == "float32_volume":  # non-finite blocks in every case: σ and t+ F, block stability impossible
        assert all(st[(c, g)] == "F" for c in ("DE", "HCE", "LHCE") for g in ("conductivity", "transference_number"))
        assert "non-finite block" in doc["items"]["A3"]["reason"]
    else:  # clean_valid over unresolved D, η, σ, t+
        assert doc["claimed_outcome"] == "clean_valid" and doc["expected_outcome"] == "partial"
        assert all(st[(c, g)] == "M" for c in ("DE", "HCE", "LHCE")
                   for g in ("self_diffusion", "viscosity", "conductivity", "transference_number"))
    assert result["agent_input_intact"]


def test_harbor_verifier_scores_the_oracle_workspace_as_the_episode_did(oracle_episode, tmp_path):
    """tests/test.sh of the Harbor task, run on this host against the oracle's workspace."""
    task = write_harbor_task("micro", tmp_path / "task")
    out = tmp_path / "verifier"
    reward = run_verifier(task, oracle_episode / "workspace", out)
    result = json.loads((oracle_episode / "result.json").read_text())
    assert reward["reward"] == pytest.approx(result["score"] / 100.0, abs=1e-5)
    assert {k: reward[k] for k in ("simulation", "analysis", "evidence", "outcome")} == pytest.approx(
        {"simulation": result["dimensions"]["S"], "analysis": result["dimensions"]["A"],
         "evidence": result["dimensions"]["E"], "outcome": result["dimensions"]["O"]})
    assert (out / "audit" / "saeo.json").is_file()
