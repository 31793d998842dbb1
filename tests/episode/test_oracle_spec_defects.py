"""Issue 45's "Must show" on the oracle episode's micro three-case run (real GROMACS, cases DE, HCE, LHCE).

Each class of the audit-from-the-specification issue is planted twice, in different cases and observables, the
cases, observables and magnitudes drawn from ``MDBENCH_TEST_SEED`` (:mod:`mdbench.episode.spec_defects`), in a
copy of the oracle's workspace left the way a buggy agent leaves it (records follow the defect, checksums
refreshed). Each lowers the item it names and the composite; the honest run and every honest control (a
labelled additional Nernst–Einstein t+, a justified guard revision with its sensitivity table, rounded report
numbers with an extra recorded notes file) leave every item and the composite where the honest audit has them.

The oracle episode is made once per session (conftest.py, ~8 min on an idle 2-core machine): ``slow``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from _episode_helpers import ORACLE_TIMEOUT_MIN
from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.episode.spec_defects import F_ACTION, make_failed, plant, planted_defects

pytestmark = [pytest.mark.slow, pytest.mark.gromacs, pytest.mark.timeout(ORACLE_TIMEOUT_MIN * 60 + 1800)]
SEED = seed_for("audit45/planted")


def _audit(run: Path, bundle: Path, out: Path) -> tuple[dict[str, float], float, list[dict]]:
    audit_run(run, bundle, out, reanalysis=True)
    doc = json.loads((out / "saeo.json").read_text())
    return {i: v["final"] for i, v in doc["items"].items()}, doc["composite"]["final"], doc["findings"]


@pytest.fixture(scope="module")
def honest(oracle_episode, tmp_path_factory) -> tuple[Path, Path, dict[str, float], float]:
    """(workspace, bundle, items, composite) of the oracle's run audited with the reanalysis."""
    ws, bundle = oracle_episode / "workspace", oracle_episode / "bundle"
    items, composite, _ = _audit(ws, bundle, tmp_path_factory.mktemp("honest") / "a")
    return ws, bundle, items, composite


def _planted(ws: Path) -> list:
    return planted_defects(SEED, ws)


def test_two_instances_per_class_in_different_cases_and_observables(honest):
    ws = honest[0]
    by_kind: dict[str, list] = {}
    for p in _planted(ws):
        by_kind.setdefault(p.kind, []).append(p)
    assert set(by_kind) == {"coverage", "protocol", "trajectory", "next_action", "control"}
    for kind in ("coverage", "protocol", "trajectory", "next_action"):
        a, b = by_kind[kind]
        assert a.case != b.case and a.observable != b.observable, (a, b)


@pytest.mark.parametrize("index", range(8))
def test_each_planted_instance_lowers_its_named_item(honest, tmp_path, index):
    ws, bundle, base, base_c = honest
    p = [x for x in _planted(ws) if not x.honest][index]
    run = plant(ws, p, tmp_path / "run")
    items, composite, findings = _audit(run, bundle, tmp_path / "a")
    for item in p.items:
        assert items[item] < base[item], (p.summary, item, base[item], items[item], findings)
    assert composite < base_c, (p.summary, composite, base_c)
    if p.kind == "next_action":  # the contradicting action, not the state, lowers O2
        assert any(f["code"] == "next_action_contradicts_state" and f["case"] == p.case for f in findings), findings


@pytest.mark.parametrize("index", range(4))
def test_honest_run_and_each_control_leave_every_item(honest, tmp_path, index):
    ws, bundle, base, base_c = honest
    p = [x for x in _planted(ws) if x.honest][index]
    run = plant(ws, p, tmp_path / "run")
    items, composite, findings = _audit(run, bundle, tmp_path / "a")
    assert items == base, (p.summary, {i: (base[i], v) for i, v in items.items() if v != base[i]}, findings)
    assert composite == base_c


def test_a_failed_result_with_its_admissible_action_keeps_O2(honest, tmp_path):
    """The F instance's reference: the same failure with the action the seed admits (correct and recompute)
    leaves O2 where the honest run has it — the planted action, not the failure, lowers O2."""
    ws, bundle, base, _ = honest
    f = next(x for x in _planted(ws) if x.name == "f_action_extend_sampling")
    run = Path(shutil.copytree(ws, tmp_path / "run", symlinks=True))
    make_failed(run, f.case, f.observable, 0, F_ACTION)
    items, _c, findings = _audit(run, bundle, tmp_path / "a")
    assert items["O2"] == base["O2"], [x for x in findings if x["item"] == "O2"]
    assert not [x for x in findings if x["code"] == "next_action_contradicts_state"]
