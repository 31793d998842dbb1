"""A documented *synthetic* record whose ground truth is generated — never presented as experimental.

Why it exists: the shipped real record (vapdiff_crystal) has a single evidence item per experiment that *is*
the label, so the evidence budget never binds, claim calibration is always 0, and there is no validity axis
and no expert review. No second real, openly licensed record with evidence beyond the label was found among
the package registries reachable here (see ``docs/`` note in the module's tests). This record exercises the
evidence, validity and review paths of the environment and of the metrics with a known generative truth.

Generative model (seeded, :data:`GENERATOR_SEED`; every experiment is drawn independently):

* descriptors (pre-result): ``temperature_C`` ~ U(300, 900), ``time_h`` ~ U(1, 12),
  ``energy_eV_per_atom`` ~ N(−0.05, 0.04), ``ratio`` ~ U(0.2, 0.8), ``family`` ∈ {A … F};
* validity: P(valid) = σ(2.4 + 1.5 z_E − 1.1 z_T²) with z the standardised energy / temperature
  (≈ 80 % valid); an invalid experiment has no category and a recorded failure reason;
* category of a valid experiment: softmax of linear scores in the standardised descriptors plus a family
  effect, over :data:`CATEGORIES`;
* evidence (tiers and what the evidence contract says each supports):

  - ``execution_log`` — ``{"valid": bool, "failure_reason"}``; supports *validity* (it states the recorded
    validity — support is derived from it, not from the mere presence of the item);
  - ``screening_signal`` — two replicates of a 4-vector, one-hot(category) + N(0, 0.8²) noise; supports
    nothing (a numerical signal alone does not establish a claim); missing for invalid experiments;
  - ``phase_analysis`` — automated phase fractions ``{reactant, product, byproduct}`` with noise; supports
    nothing (a fit alone does not establish the phase identity); missing for invalid experiments and for
    20 % of valid ones (recorded reason);

* reviews — for 60 % of valid experiments an expert review with quality tier ``1`` (best) … ``3``:
  acceptance and the *verified* phase fractions (never the category); supports *category* when accepted.

Category ↔ phases (how the generator draws fractions; a coordinator must make this conversion itself):
``none`` — reactant ≳ 0.9; ``partial`` — reactant 0.3–0.7, rest product; ``complete`` — reactant < 0.05,
product ≳ 0.8; ``byproduct`` — byproduct ≳ 0.35.

Twelve experiments with four inspectable items each need 48 inspections: the full-length evidence budget of
36 binds.
"""

from __future__ import annotations

import numpy as np

from mdbench.sdl.ledger import EvidenceItem, Experiment, ExpertReview, Ledger, Outcome

CATEGORIES = ("none", "partial", "complete", "byproduct")
FAMILIES = ("A", "B", "C", "D", "E", "F")
GENERATOR_SEED = 20260301
N_EXPERIMENTS = 480
FAILURE_REASONS = ("crucible spill during heating", "furnace interlock tripped", "sample lost in transfer")


def _phases(rng: np.random.Generator, cat: str) -> dict[str, float]:
    if cat == "none":
        r = rng.uniform(0.88, 1.0)
        f = {"reactant": r, "product": (1 - r) * rng.uniform(0, 1), "byproduct": 0.0}
    elif cat == "partial":
        r = rng.uniform(0.3, 0.7)
        f = {"reactant": r, "product": (1 - r) * rng.uniform(0.85, 1.0), "byproduct": 0.0}
    elif cat == "complete":
        r = rng.uniform(0.0, 0.05)
        f = {"reactant": r, "product": (1 - r) * rng.uniform(0.85, 1.0), "byproduct": 0.0}
    else:
        b = rng.uniform(0.35, 0.8)
        r = (1 - b) * rng.uniform(0, 0.5)
        f = {"reactant": r, "product": 0.0, "byproduct": b}
    f["byproduct"] = f["byproduct"] or max(0.0, 1.0 - f["reactant"] - f["product"])
    total = sum(f.values())
    return {k: round(v / total, 4) for k, v in f.items()}


def synthetic_record(n: int = N_EXPERIMENTS, seed: int = GENERATOR_SEED) -> Ledger:
    """Generate the synthetic record (deterministic for a given ``n`` and ``seed``); see module docstring."""
    rng = np.random.default_rng(seed)
    T = rng.uniform(300, 900, n)
    t = rng.uniform(1, 12, n)
    E = rng.normal(-0.05, 0.04, n)
    ratio = rng.uniform(0.2, 0.8, n)
    fam = rng.integers(len(FAMILIES), size=n)
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    zT, zt, zE, zr = z(T), z(t), z(E), z(ratio)
    p_valid = 1.0 / (1.0 + np.exp(-(2.4 + 1.5 * zE - 1.1 * zT ** 2)))
    valid = rng.uniform(size=n) < p_valid
    fam_effect = rng.normal(0, 1.0, (len(FAMILIES), len(CATEGORIES)))
    W = np.array([[-1.2, -0.6, 0.2], [0.0, 0.4, -0.2], [1.2, 0.5, 0.4], [0.2, -0.5, -0.6]])   # cats × (T, t, r)
    scores = np.column_stack([zT, zt, zr]) @ W.T - 1.0 * zE[:, None] * np.array([1, 0, -1, 0]) + fam_effect[fam]
    probs = np.exp(scores - scores.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    experiments = []
    for i in range(n):
        eid = f"SYN_{i:04d}"
        desc = {"temperature_C": round(float(T[i]), 1), "time_h": round(float(t[i]), 2),
                "energy_eV_per_atom": round(float(E[i]), 4), "ratio": round(float(ratio[i]), 3),
                "family": FAMILIES[fam[i]]}
        if valid[i]:
            cat = CATEGORIES[int(rng.choice(len(CATEGORIES), p=probs[i]))]
            outcome = Outcome(True, cat)
            reason = None
        else:
            cat = None
            outcome = Outcome(False, None)
            reason = FAILURE_REASONS[int(rng.integers(len(FAILURE_REASONS)))]
        ev = [EvidenceItem(f"{eid}:log", "execution_log", f"synthetic:{eid}:log",
                           {"valid": bool(valid[i]), "failure_reason": reason}, None, ("validity",))]
        for k in range(2):
            if cat is None:
                ev.append(EvidenceItem(f"{eid}:screen{k}", "screening_signal", None, None,
                                       "no screening signal: the experiment failed physically", ()))
            else:
                sig = np.eye(len(CATEGORIES))[CATEGORIES.index(cat)] + rng.normal(0, 0.8, len(CATEGORIES))
                ev.append(EvidenceItem(f"{eid}:screen{k}", "screening_signal", f"synthetic:{eid}:screen{k}",
                                       {"signal": dict(zip(CATEGORIES, np.round(sig, 3).tolist()))}, None, ()))
        true_phases = _phases(rng, cat) if cat else None
        if cat is None:
            ev.append(EvidenceItem(f"{eid}:phases", "phase_analysis", None, None,
                                   "no phase analysis: the experiment failed physically", ()))
        elif rng.uniform() < 0.2:
            ev.append(EvidenceItem(f"{eid}:phases", "phase_analysis", None, None,
                                   "phase analysis not run (instrument queue)", ()))
        else:
            noisy = {k: max(0.0, v + rng.normal(0, 0.12)) for k, v in true_phases.items()}
            s = sum(noisy.values()) or 1.0
            ev.append(EvidenceItem(f"{eid}:phases", "phase_analysis", f"synthetic:{eid}:phases",
                                   {"phase_fractions": {k: round(v / s, 4) for k, v in noisy.items()},
                                    "fit_residual": round(float(rng.uniform(0.05, 0.3)), 3)}, None, ()))
        reviews = []
        if cat is not None and rng.uniform() < 0.6:
            tier = str(int(rng.integers(1, 4)))
            accepted = bool(rng.uniform() < {"1": 0.9, "2": 0.75, "3": 0.5}[tier])
            reviews.append(ExpertReview(f"{eid}:review", tier,
                                        {"is_accepted": accepted, "human_quality_score": int(tier),
                                         "verified_phase_fractions": true_phases if accepted else None},
                                        ("category",) if accepted else ()))
        experiments.append(Experiment(eid, desc, outcome, tuple(ev), tuple(reviews)))
    provenance = {"source": "generated by mdbench.sdl.synthetic (not experimental data)", "experimental": False,
                  "generator_seed": seed, "n_experiments": n}
    return Ledger(name="synthetic_evidence", categories=CATEGORIES, validity_axis=True,
                  evidence_tiers=("execution_log", "screening_signal", "phase_analysis"),
                  review_quality_tiers=("1", "2", "3"), experiments=tuple(experiments), provenance=provenance)
