"""Scores only from verified rows: a tampered trace is refused with the first bad row named, a rewritten chain
is refused by its signature, an untampered one re-scores identically; invalid forecasts follow the rule
registered in the frozen assignment."""

from __future__ import annotations

import copy
import json
import math
import shutil

import pytest
from sdl_helpers import KEYS, SMALL_ROLES

from mdbench.errors import InputError
from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.compiler import Budgets, CompileSpec, EvaluatorKeys, compile_assignments
from mdbench.sdl.environment import GENESIS
from mdbench.sdl.leaderboard import score_system
from mdbench.sdl.ledger import sha256_json
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import UniformPolicy, make_policy
from mdbench.sdl.runner import run_system
from mdbench.sdl.verify import TraceError, sign_trace, verify_trace


@pytest.fixture(scope="module")
def uniform_run(tmp_path_factory, vapdiff, tiny_assignments):
    """A uniform policy on two horizon-2 assignments, written to disk like `mdbench sdl run`."""
    root = write_compiled(tmp_path_factory.mktemp("c") / "asg", vapdiff, tiny_assignments, KEYS)
    compiled = load_compiled(root)
    out = tmp_path_factory.mktemp("res")
    run_system(compiled, compiled.assignments[:2], lambda: make_policy("uniform", 0), "uniform", out)
    return compiled, out / "uniform"


def _rechain(log):
    """What an attacker who knows the format does after editing: recompute every hash (not the signature)."""
    prev = GENESIS
    for e in log:
        e["prev_sha256"] = prev
        body = {k: v for k, v in e.items() if k != "sha256"}
        e["sha256"] = sha256_json(body)
        prev = e["sha256"]


def test_untampered_traces_rescore_identically(uniform_run):
    compiled, sysdir = uniform_run
    run = score_system(sysdir, compiled)
    assert run.refused is None and len(run.metrics) == 2
    for aid, m in run.metrics.items():
        saved = json.loads((sysdir / aid / "metrics.json").read_text())
        saved.pop("system")
        assert m == saved
        assert m["branches"]["adaptive"]["scores_nats"] == pytest.approx([-math.log(4)] * 3, abs=1e-12)


def test_edited_heldout_rows_are_refused_with_the_row_named(uniform_run):
    """The issue's attack: perfect held-out rows pasted into a uniform trace (−1.3863 → about 0)."""
    compiled, sysdir = uniform_run
    aid = compiled.assignments[0].assignment_id
    asg = compiled.assignments[0]
    tr = json.loads((sysdir / aid / "adaptive.trace.json").read_text())
    by_id = compiled.ledger.by_id()
    cats = compiled.ledger.categories
    cp = tr["checkpoints"][1]
    for pub, row in cp["rows"].items():
        true = by_id[asg.ledger_id(pub)].outcome.category
        row["p_category"] = {c: (1.0 if c == true else 0.0) for c in cats}
    with pytest.raises(TraceError, match=r"checkpoints\[1\] \(after_1\), field 'rows' does not match the "
                                         rf"hash-chained log entry seq {cp['seq']}"):
        verify_trace(tr, asg, compiled.keys, "adaptive.trace.json")
    # editing the chained entry too breaks the chain at that entry …
    entry = tr["log"][cp["seq"]]
    entry["rows"] = cp["rows"]
    with pytest.raises(TraceError, match=rf"log\[{cp['seq']}\] \(seq {cp['seq']}, checkpoint\): sha256 does not match"):
        verify_trace(tr, asg, compiled.keys)
    # … and recomputing the whole chain is caught by the signature of its head
    _rechain(tr["log"])
    tr["chain_head"] = tr["log"][-1]["sha256"]
    with pytest.raises(TraceError, match="not signed with this compile's evaluator key"):
        verify_trace(tr, asg, compiled.keys)
    # a forger signing with a key of their own is refused as well
    with pytest.raises(TraceError, match="not signed"):
        verify_trace(sign_trace(tr, EvaluatorKeys.generate()), asg, compiled.keys)


def test_edited_forecasts_counters_and_files_are_refused(uniform_run, tmp_path):
    compiled, sysdir = uniform_run
    asg = compiled.assignments[0]
    base = json.loads((sysdir / asg.assignment_id / "adaptive.trace.json").read_text())
    tr = copy.deepcopy(base)
    tr["experiments"][0]["forecasts"][0]["row"]["p_category"] = {c: 0.25 for c in compiled.ledger.categories}
    tr["experiments"][0]["forecasts"][0]["row"]["p_category"][compiled.ledger.categories[0]] = 0.3
    with pytest.raises(TraceError, match=r"experiments\[0\] \(X\w+\), field 'forecasts'\[0\] does not match "
                                         r"the hash-chained log entry seq \d+"):
        verify_trace(tr, asg, compiled.keys)
    tr = copy.deepcopy(base)
    tr["n_calls"] = 3
    with pytest.raises(TraceError, match="n_calls: 3 does not match"):
        verify_trace(tr, asg, compiled.keys)
    tr = copy.deepcopy(base)
    del tr["log"][3]
    with pytest.raises(TraceError, match=r"log\[3\].*(sequence number|does not link)"):
        verify_trace(tr, asg, compiled.keys)
    with pytest.raises(TraceError, match=r"log\[0\] \(seq 0, start\) is not a start of assignment"):
        verify_trace(base, compiled.assignments[1], compiled.keys)
    # the same edit made on disk: score refuses the system, naming the file and the row
    sysdir2 = tmp_path / "uniform"
    shutil.copytree(sysdir, sysdir2)
    p = sysdir2 / asg.assignment_id / "adaptive.trace.json"
    d = json.loads(p.read_text())
    d["checkpoints"][2]["valid"] = False          # e.g. to have a bad checkpoint rescored by another rule
    p.write_text(json.dumps(d))
    run = score_system(sysdir2, compiled)
    assert run.refused and str(p) in run.refused and "checkpoints[2] (after_2)" in run.refused
    # an edited metrics.json changes nothing: numbers come from the verified traces
    m = sysdir / compiled.assignments[1].assignment_id / "metrics.json"
    d = json.loads(m.read_text())
    d["branches"]["adaptive"]["adaptive_auc_nats"] = -0.0001
    m.write_text(json.dumps(d))
    assert score_system(sysdir, compiled).metrics[compiled.assignments[1].assignment_id]["branches"]["adaptive"][
        "adaptive_auc_nats"] == pytest.approx(-math.log(4))


class BrokenPre(UniformPolicy):
    """Answers the pre-campaign held-out call with garbage and the first checkpoint with garbage too."""

    def forecast(self, state, experiment_ids):
        n_closed = sum(e["closed"] for e in state["experiments"])
        if state["phase"] == "heldout_forecast" and n_closed in (0, 1):
            return [{"experiment_id": "nonsense"}]
        return super().forecast(state, experiment_ids)


@pytest.mark.parametrize("rule", ["max_loss", "carry_forward"])
def test_invalid_forecasts_follow_the_registered_rule(vapdiff, rule):
    spec = CompileSpec(rotations=1, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 0), seed=2, invalid_forecast=rule)
    asg = compile_assignments(vapdiff, spec, KEYS)[0]
    assert asg.content()["scoring"]["invalid_forecast"] == rule      # registered in the hashed assignment
    m = campaign_metrics(run_campaign(vapdiff, asg, BrokenPre, seed=0, controls=False).traces, vapdiff, asg)
    b = m["branches"]["adaptive"]
    worst = math.log(asg.floor)                                      # −ln(floor) without a validity axis
    assert b["n_invalid_checkpoints"] == 2
    assert b["scores_nats"][0] == pytest.approx(worst)              # no invented −ln K for an invalid pre
    assert b["scores_nats"][1] == pytest.approx(worst)              # carry_forward of the (max-loss) pre
    assert b["scores_nats"][2] == pytest.approx(-math.log(4))


def test_a_trace_without_signature_or_of_another_format_is_refused(vapdiff, tiny_assignments):
    run = run_campaign(vapdiff, tiny_assignments[0], lambda: make_policy("uniform", 0), seed=0, controls=False)
    with pytest.raises(TraceError, match="not signed"):
        verify_trace(run.traces["adaptive"], tiny_assignments[0], KEYS)
    assert verify_trace(sign_trace(run.traces["adaptive"], KEYS), tiny_assignments[0], KEYS)["n_calls"] > 0
    with pytest.raises(InputError, match="format"):
        verify_trace({"log": []}, tiny_assignments[0], KEYS)
