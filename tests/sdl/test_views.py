"""Per-assignment views: public ids are salted per assignment (the agent tree as a whole still holds every
panel outcome in some initial context, but no id links two assignments), a session sees one assignment file,
and an honest coordinator scores exactly the same as under the former compile-wide ids."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from sdl_helpers import KEYS

from mdbench.sdl.bundle import session_view_files, write_compiled
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.compiler import Assignment, CompileSpec, compile_assignments
from mdbench.sdl.metrics import campaign_metrics
from mdbench.sdl.policies import make_policy


def _compile_wide_ids(asg: Assignment) -> Assignment:
    """The same assignment with the former compile-wide ids (HMAC of the ledger id alone), re-hashed."""
    old = {i: "X" + hmac.new(KEYS.salt.encode(), i.encode(), hashlib.sha256).hexdigest()[:10] for i in asg.public_ids}
    fields = {k: v for k, v in asg.__dict__.items() if not k.startswith("_")}
    a = Assignment(**{**fields, "public_ids": old, "sha256": ""})
    return Assignment(**{**fields, "public_ids": old, "sha256": a.compute_sha256()})


def test_the_same_experiment_has_unrelated_ids_in_different_assignments(vapdiff, tmp_path):
    asgs = compile_assignments(vapdiff, CompileSpec(), KEYS)        # the 36 assignments of the default compile
    root = write_compiled(tmp_path / "c", vapdiff, asgs, KEYS)
    seen: dict[str, str] = {}
    for a in asgs:
        for pub in a.public_ids.values():
            assert pub not in seen, f"{pub} of {a.assignment_id} also names an experiment of {seen[pub]}"
            seen[pub] = a.assignment_id
    # every held-out experiment of rotation 4 is in some other assignment's initial context, under another id
    a4 = next(a for a in asgs if a.full_length and a.rotation == 4)
    ctx_elsewhere = {i for a in asgs if a is not a4 for i in a.roles["initial_context"]}
    assert set(a4.roles["heldout"]) <= ctx_elsewhere
    view = json.loads((root / "agent" / f"{a4.assignment_id}.json").read_text())
    own = {c["experiment_id"] for k in ("initial_context", "candidates", "heldout_panel") for c in view[k]}
    for other in asgs:
        if other is a4:
            continue
        text = (root / "agent" / f"{other.assignment_id}.json").read_text()
        assert not any(pub in text for pub in own)
    # a session's view: its assignment, the schemas and the README; never index.json or another assignment
    names = [p.name for p in session_view_files(root / "agent", a4.assignment_id)]
    assert names == ["README.md", "action_schema.json", "forecast_row_schema.json", f"{a4.assignment_id}.json"]


@pytest.mark.parametrize("policy", ["kernel", "class_prior"])
def test_honest_scores_are_unchanged_by_per_assignment_ids(vapdiff, small_assignments, policy):
    """The shipped record, two full-length assignments: held-out losses of every branch equal to 1e-12."""
    for asg in small_assignments[:2]:
        legacy = _compile_wide_ids(asg)
        assert legacy.public_ids != asg.public_ids and legacy.roles == asg.roles
        new = campaign_metrics(run_campaign(vapdiff, asg, lambda: make_policy(policy, 0), seed=0,
                                            random_draws=1).traces, vapdiff, asg)
        old = campaign_metrics(run_campaign(vapdiff, legacy, lambda: make_policy(policy, 0), seed=0,
                                            random_draws=1).traces, vapdiff, legacy)
        for b in new["branches"]:
            assert new["branches"][b]["scores_nats"] == pytest.approx(old["branches"][b]["scores_nats"], abs=1e-12), b
        assert new["branches"]["adaptive"]["adaptive_auc_nats"] == pytest.approx(
            old["branches"]["adaptive"]["adaptive_auc_nats"], abs=1e-12)
        assert new["selection_lift_nats"] == pytest.approx(old["selection_lift_nats"], abs=1e-12)
