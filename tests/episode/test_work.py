"""Work accounting on the real oracle episode (issue 48): the oracle is credited with the MD it computed, and the
buggy reference agents' replays of it are recognised as work not done in their episodes (recorded, not applied:
they replay the oracle's run by design)."""

from __future__ import annotations

import json

import pytest

from mdbench.episode import work

from _episode_helpers import ORACLE_TIMEOUT_MIN

pytestmark = [pytest.mark.slow, pytest.mark.gromacs, pytest.mark.timeout(ORACLE_TIMEOUT_MIN * 60 + 1800)]


def test_the_oracle_is_credited_with_the_md_it_computed(oracle_episode):
    result = json.loads((oracle_episode / "result.json").read_text())
    w = result["work"]
    # a reference agent: the verdict is recorded (applied or not, the oracle is credited)
    assert w["verdict"] == work.CREDITED and not w["applied"] and not result["work_not_done_here"], w
    assert set(w["claimed"]["ns_per_case"]) == {"DE", "HCE", "LHCE"} and w["logs_before_episode"] == []
    # every case benchmarked on its own input; the MD needs less CPU than the agent's tree used
    assert all("ns_per_core_s" in b for b in w["benchmarks"].values()), w["benchmarks"]
    assert 0 < w["required_core_s"] <= w["available_core_s"]
    assert result["audit"]["findings"] == 0 and result["audit"]["items"]["Sim4"] == 1.0


def test_a_buggy_replay_is_recognised_and_left_as_the_seed_scripts_it(buggy_episodes):
    for kind, ep in buggy_episodes.items():
        result = json.loads((ep / "result.json").read_text())
        w = result["work"]
        assert w["verdict"] == work.NOT_DONE_HERE and not w["applied"] and not result["work_not_done_here"], kind
        assert w["required_core_s"] > w["available_core_s"]
