"""Built-in campaign policies and the policy interface.

A policy sees only JSON copies of the policy-visible state (:meth:`CampaignEnv.visible_state`). Interface:

* ``reset(seed)`` — start a fresh session;
* ``act(state) -> action`` — one action of :data:`mdbench.sdl.environment.ACTION_SCHEMA`;
* ``forecast(state, experiment_ids) -> rows`` — forecast rows (used for evaluator held-out calls and, in the
  schedule-matched control, for the open experiment's local forecasts);
* ``review_expectation(state, experiment_id) -> {"forecast_changes_conclusion", "forecast_quality_tier"}``;
* ``close()``;
* ``session_record()`` (optional) — what the session was and did: name, isolation method (recorded in the
  trace), for external processes their exit status and stderr tail, for LLM sessions tokens and cost.

Trust: the built-ins registered here run in the evaluator's process (a fast path for tests and baselines) and
are marked ``trusted`` in their traces. Any other in-process policy object is recorded as an *untrusted
in-process* coordinator, and the leaderboard does not rank it: coordinators that are not shipped baselines
run as confined processes (:mod:`mdbench.sdl.external`) or behind an endpoint (:mod:`mdbench.sdl.llm_policy`).

Built-ins (registry :data:`POLICIES`, filled explicitly):

``uniform``      uniform over the K joint outcomes (scores ln K); selects candidates in listed order.
``class_prior``  category (and validity) frequencies of the initial context, Laplace-smoothed, never updated.
``kernel``       learning baseline: kernel-weighted Bayesian categorical model on pre-result descriptors,
                 trained on the initial context plus every outcome the policy has *revealed* through supported
                 evidence, shrunk towards the smoothed class frequencies (:class:`KernelPolicy`); selects the
                 candidate of highest predictive entropy (uncertainty sampling).
``knn``          the same with k-nearest-neighbour weights.
``random``       the kernel forecaster with seeded uniform-random experiment selection.

All built-ins inspect each evidence tier of an open experiment once (while evidence budget lasts), buy a review
when one is budgeted, and update the local forecast from revealed evidence according to what the evidence
supports (evidence contract): a revealed category/validity is given probability ``1 - (K' - 1) * delta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

#: Probability mass left on the other values after a supported reveal.
REVEAL_DELTA = 0.01


class Policy(Protocol):
    """The policy interface (see module docstring)."""

    name: str

    def reset(self, seed: int) -> None: ...

    def act(self, state: dict[str, Any]) -> dict[str, Any]: ...

    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> list[dict[str, Any]]: ...

    def review_expectation(self, state: dict[str, Any], experiment_id: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


def session_record(policy: Any) -> dict[str, Any]:
    """What a session was (name, isolation) and did, for the trace; see the module docstring."""
    rec = getattr(policy, "session_record", None)
    if callable(rec):
        return rec()
    return {"name": getattr(policy, "name", type(policy).__name__),
            "isolation": {"method": "in_process", "trusted": False,
                          "note": "in-process policy object that is not a shipped baseline: not ranked"}}


def visible_labels(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Outcome knowledge in a visible state: ``{id: {"valid": bool|None, "category": str|None}}``.

    From the initial context (outcomes shown) and from revealed evidence/reviews, only on the axes the
    evidence contract says they support, and only from what the payload states: validity from an explicit
    boolean ``valid``, the category from an explicit ``category`` (a supported reveal that states neither
    leaves the axis unknown — nothing defaults to valid).
    """
    out: dict[str, dict[str, Any]] = {}
    for c in state["initial_context"]:
        out[c["experiment_id"]] = {"valid": c["outcome"]["valid"], "category": c["outcome"]["category"]}
    for e in state["experiments"]:
        lab: dict[str, Any] = {"valid": None, "category": None}
        for r in e["reveals"]:
            if r.get("status") != "revealed":
                continue
            payload = r.get("payload") or {}
            if "validity" in r.get("supports", []) and isinstance(payload.get("valid"), bool):
                lab["valid"] = payload["valid"]
            if "category" in r.get("supports", []):
                cat = payload.get("category")
                if isinstance(cat, str):
                    lab["category"] = cat
                    lab["valid"] = True
        if lab["valid"] is not None or lab["category"] is not None:
            out[e["experiment_id"]] = lab
    return out


def _row(eid: str, p_valid: float, p_cat: np.ndarray, cats: list[str], validity_axis: bool) -> dict[str, Any]:
    p_cat = np.asarray(p_cat, dtype=float)
    p_cat = p_cat / p_cat.sum()
    d = {c: float(p) for c, p in zip(cats, p_cat)}
    # make the sum exact in floating point: give the residual to the largest entry
    top = cats[int(np.argmax(p_cat))]
    d[top] += 1.0 - sum(d.values())
    return {"experiment_id": eid, "p_valid": float(p_valid) if validity_axis else 1.0, "p_category": d}


class BasePolicy:
    """Shared protocol logic; subclasses implement :meth:`predict` and :meth:`choose`."""

    name = "base"

    def __init__(self, seed: int = 0):
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Start a fresh session with ``seed``."""
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def close(self) -> None:
        """Nothing to release."""

    def session_record(self) -> dict[str, Any]:
        """Name and isolation: a registered built-in runs in-process and is trusted."""
        builtin = next((n for n, f in POLICIES.items() if f is type(self)), None)
        return {"name": self.name, "isolation": {"method": "in_process", "trusted": builtin is not None,
                                                 "builtin": builtin}}

    # -- to override
    def predict(self, state: dict[str, Any], ids: list[str]) -> dict[str, tuple[float, np.ndarray]]:
        """``{id: (p_valid, p_category)}`` before any reveal on those ids."""
        raise NotImplementedError

    def choose(self, state: dict[str, Any], options: list[str]) -> str:
        """Which unselected candidate to select next."""
        return options[0]

    # -- shared
    def forecast(self, state: dict[str, Any], experiment_ids: list[str]) -> list[dict[str, Any]]:
        """Forecast rows; revealed, supported evidence on an id overrides the model on that axis."""
        rec = state["record"]
        cats, va = rec["categories"], rec["validity_axis"]
        pred = self.predict(state, experiment_ids)
        labels = {e["experiment_id"]: e for e in state["experiments"]}
        known = visible_labels(state)
        rows = []
        for eid in experiment_ids:
            pv, pc = pred[eid]
            if eid in labels and eid in known:
                lab = known[eid]
                k = len(cats)
                if lab["category"] in cats:
                    pc = np.full(k, REVEAL_DELTA)
                    pc[cats.index(lab["category"])] = 1.0 - (k - 1) * REVEAL_DELTA
                if lab["valid"] is not None:
                    pv = 1.0 - REVEAL_DELTA if lab["valid"] else REVEAL_DELTA
            rows.append(_row(eid, pv, pc, cats, va))
        return rows

    def review_expectation(self, state: dict[str, Any], experiment_id: str) -> dict[str, Any]:
        """P(review changes the conclusion) = 1 − max joint probability; tier = first listed tier."""
        row = self.forecast(state, [experiment_id])[0]
        joint = [row["p_valid"] * p for p in row["p_category"].values()] + [1.0 - row["p_valid"]]
        tiers = state["record"]["review_quality_tiers"]
        return {"forecast_changes_conclusion": float(min(1.0, max(0.0, 1.0 - max(joint)))),
                "forecast_quality_tier": tiers[0] if tiers else "unknown"}

    def act(self, state: dict[str, Any]) -> dict[str, Any]:
        """Select → prior → inspect each tier once (budget permitting) → review (if budgeted) → next / stop."""
        phase = state["phase"]
        eid = state["open_experiment"]
        if phase in ("prior_forecast", "update_forecast"):
            return {"action": "submit_forecast", "forecast": self.forecast(state, [eid])[0]}
        rem = state["budgets_remaining"]
        if phase == "investigate":
            tr = next(e for e in state["experiments"] if e["experiment_id"] == eid)
            seen = {r.get("tier") for r in tr["reveals"] if r["kind"] == "evidence"}
            todo = [t for t in state["record"]["evidence_tiers"] if t not in seen]
            if todo and rem["evidence"] > 0:
                return {"action": "inspect_evidence", "experiment_id": eid, "tier": todo[0]}
            if rem["reviews"] > 0 and not any(r["kind"] == "review" for r in tr["reveals"]):
                exp = self.review_expectation(state, eid)
                return {"action": "request_review", "experiment_id": eid, **exp}
        options = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
        if rem["experiments"] > 0 and options:
            return {"action": "select_experiment", "experiment_id": self.choose(state, options)}
        return {"action": "stop"}


class UniformPolicy(BasePolicy):
    """Uniform over the K joint outcomes, always (a non-learning floor: scores exactly ln K)."""

    name = "uniform"

    def predict(self, state, ids):
        k = len(state["record"]["categories"])
        pv = k / (k + 1) if state["record"]["validity_axis"] else 1.0
        return {i: (pv, np.full(k, 1.0 / k)) for i in ids}

    def forecast(self, state, experiment_ids):
        pred = self.predict(state, experiment_ids)
        cats = state["record"]["categories"]
        return [_row(i, pred[i][0], pred[i][1], cats, state["record"]["validity_axis"]) for i in experiment_ids]


def _class_freqs(state: dict[str, Any], labels: dict[str, dict[str, Any]], alpha: float = 1.0):
    cats = state["record"]["categories"]
    n_cat = np.full(len(cats), alpha)
    n_valid, n_all = alpha, 2 * alpha
    for lab in labels.values():
        if lab["valid"] is not None:
            n_all += 1
            n_valid += bool(lab["valid"])
        if lab["category"] in cats:
            n_cat[cats.index(lab["category"])] += 1
    return n_valid / n_all, n_cat / n_cat.sum()


class ClassPriorPolicy(BasePolicy):
    """Laplace-smoothed outcome frequencies of the initial context; never updated by evidence."""

    name = "class_prior"

    def predict(self, state, ids):
        ctx = {c["experiment_id"]: {"valid": c["outcome"]["valid"], "category": c["outcome"]["category"]}
               for c in state["initial_context"]}
        pv, pc = _class_freqs(state, ctx)
        return {i: (pv, pc) for i in ids}

    def forecast(self, state, experiment_ids):
        pred = self.predict(state, experiment_ids)
        cats = state["record"]["categories"]
        return [_row(i, pred[i][0], pred[i][1], cats, state["record"]["validity_axis"]) for i in experiment_ids]


def descriptor_matrix(state: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    """Feature matrix of every visible experiment from pre-result descriptors.

    Numeric descriptors are z-scored over all visible experiments (constant ones dropped), categorical ones
    one-hot encoded. Descriptors named ``group:name`` form a group whose columns are scaled by
    ``1/sqrt(n_columns)`` so that a block of many correlated descriptors (e.g. 53 molecular descriptors of the
    same organic) weighs like one feature. Returns ``(ids, X)`` over context, candidates, held-out panel and,
    in a future-decision call, the future panel.
    """
    items = state["initial_context"] + state["candidates"] + state["heldout_panel"] + state.get("future_panel", [])
    ids = [it["experiment_id"] for it in items]
    keys = sorted({k for it in items for k in it["descriptors"]})
    groups: dict[str, list[str]] = {}
    for k in keys:
        groups.setdefault(k.split(":", 1)[0] + (":" if ":" in k else ""), []).append(k)
    cols: list[np.ndarray] = []
    for gkeys in groups.values():
        gcols = []
        for k in gkeys:
            vals = [it["descriptors"].get(k) for it in items]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals if v is not None):
                x = np.array([np.nan if v is None else float(v) for v in vals])
                mu, sd = np.nanmean(x), np.nanstd(x)
                if not np.isfinite(sd) or sd == 0:
                    continue
                gcols.append(np.nan_to_num((x - mu) / sd, nan=0.0))
            else:
                for level in sorted({str(v) for v in vals if v is not None}):
                    gcols.append(np.array([1.0 if str(v) == level else 0.0 for v in vals]))
        if len(gkeys) > 1 and gcols:
            gcols = [c / np.sqrt(len(gcols)) for c in gcols]
        cols += gcols
    X = np.column_stack(cols) if cols else np.zeros((len(ids), 1))
    return ids, X


@dataclass(frozen=True)
class Features:
    """Feature matrix of the visible experiments of one assignment, row index by id, median NN distance."""

    index: dict[str, int]
    X: np.ndarray
    median_nn: float


#: Feature matrices shared by the built-in sessions of this process, keyed by (assignment sha256, future-panel
#: size): descriptors never change inside a campaign, and every evaluator call starts a fresh session.
_FEATURES: dict[tuple[str, int], Features] = {}


def features(state: dict[str, Any]) -> Features:
    """:class:`Features` of a state (cached per assignment, at most 16 kept)."""
    key = (state["assignment_sha256"], len(state.get("future_panel", [])))
    hit = _FEATURES.get(key)
    if hit is not None:
        return hit
    ids, X = descriptor_matrix(state)
    sq = (X ** 2).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * X @ X.T, 0.0)
    np.fill_diagonal(d2, np.inf)
    nn = np.sqrt(d2.min(axis=1))
    med = float(np.median(nn[np.isfinite(nn)])) if np.isfinite(nn).any() else 1.0
    out = Features({e: n for n, e in enumerate(ids)}, X, med if med > 0 else 1.0)
    if len(_FEATURES) >= 16:
        _FEATURES.pop(next(iter(_FEATURES)))
    _FEATURES[key] = out
    return out


class KernelPolicy(BasePolicy):
    """Learning baseline: kernel-weighted Bayesian categorical model on descriptors.

    Each labelled experiment ``i`` (initial context, plus every outcome the policy has revealed through
    supported evidence) adds a pseudo-count ``w_i(x) = exp(-|x - x_i|^2 / (2 h^2))`` to its category, on top of
    a Dirichlet prior of strength ``alpha`` centred on the Laplace-smoothed class frequencies ``pi``::

        p(c | x) = (sum_i w_i(x) [y_i = c] + alpha * pi_c) / (sum_i w_i(x) + alpha)

    (``p(valid | x)`` likewise). Features come from :func:`descriptor_matrix`; the bandwidth ``h`` is
    ``bandwidth_scale`` × the median nearest-neighbour distance among the visible experiments (a rule that uses
    descriptors only, never outcomes). Selection: the candidate of highest predictive entropy.
    """

    name = "kernel"

    def __init__(self, seed: int = 0, alpha: float = 2.0, bandwidth_scale: float = 1.0):
        self.alpha, self.bandwidth_scale = alpha, bandwidth_scale
        super().__init__(seed)

    def _weights(self, fc: Features, lab_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Kernel weights, shape (len(rows), len(lab_rows))."""
        A, B = fc.X[rows], fc.X[lab_rows]
        d2 = np.maximum((A ** 2).sum(1)[:, None] + (B ** 2).sum(1)[None, :] - 2 * A @ B.T, 0.0)
        h = self.bandwidth_scale * fc.median_nn
        return np.exp(-0.5 * d2 / h ** 2)

    def predict(self, state, ids):
        cats = state["record"]["categories"]
        labels = visible_labels(state)
        pv0, pc0 = _class_freqs(state, labels)
        fc = features(state)
        lab_ids = [e for e in labels if e in fc.index]
        if not lab_ids or not ids:
            return {i: (pv0, pc0) for i in ids}
        lab_rows = np.array([fc.index[e] for e in lab_ids])
        W = self._weights(fc, lab_rows, np.array([fc.index[i] for i in ids]))
        lab_pos = {e: n for n, e in enumerate(lab_ids)}
        for r, i in enumerate(ids):                    # never use an experiment as its own neighbour
            if i in lab_pos:
                W[r, lab_pos[i]] = 0.0
        onehot = np.zeros((len(lab_ids), len(cats)))
        valid = np.zeros(len(lab_ids))
        known_v = np.zeros(len(lab_ids))
        for n, e in enumerate(lab_ids):
            if labels[e]["category"] in cats:
                onehot[n, cats.index(labels[e]["category"])] = 1.0
            if labels[e]["valid"] is not None:
                known_v[n] = 1.0
                valid[n] = float(bool(labels[e]["valid"]))
        n_cat = W @ onehot
        pc = (n_cat + self.alpha * pc0) / (n_cat.sum(1, keepdims=True) + self.alpha)
        pv = (W @ valid + self.alpha * pv0) / (W @ known_v + self.alpha)
        return {i: (float(pv[r]), pc[r]) for r, i in enumerate(ids)}

    def choose(self, state, options):
        pred = self.predict(state, options)
        va = state["record"]["validity_axis"]

        def entropy(i: str) -> float:
            pv, pc = pred[i]
            joint = np.append(pv * pc, 1.0 - pv) if va else pc
            joint = joint[joint > 0]
            return float(-(joint * np.log(joint)).sum())

        return max(options, key=lambda i: (entropy(i), -options.index(i)))


class KNNPolicy(KernelPolicy):
    """k-nearest-neighbour variant of the learning baseline: weight 1 for the ``k`` nearest labelled, else 0."""

    name = "knn"

    def __init__(self, seed: int = 0, k: int = 5, alpha: float = 5.0):
        self.k = k
        super().__init__(seed, alpha=alpha)

    def _weights(self, fc, lab_rows, rows):
        A, B = fc.X[rows], fc.X[lab_rows]
        d2 = np.maximum((A ** 2).sum(1)[:, None] + (B ** 2).sum(1)[None, :] - 2 * A @ B.T, 0.0)
        W = np.zeros_like(d2)
        nn = np.argsort(d2, axis=1, kind="stable")[:, : self.k]
        np.put_along_axis(W, nn, 1.0, axis=1)
        return W


class RandomSelectionPolicy(KernelPolicy):
    """The kernel forecaster with seeded uniform-random experiment selection."""

    name = "random"

    def choose(self, state, options):
        return options[int(self.rng.integers(len(options)))]


#: name → factory(seed) of built-in policies.
POLICIES: dict[str, Callable[[int], BasePolicy]] = {}


def register_policy(name: str, factory: Callable[[int], BasePolicy]) -> None:
    """Add a built-in policy to :data:`POLICIES`."""
    POLICIES[name] = factory


register_policy("uniform", UniformPolicy)
register_policy("class_prior", ClassPriorPolicy)
register_policy("kernel", KernelPolicy)
register_policy("knn", KNNPolicy)
register_policy("random", RandomSelectionPolicy)


def make_policy(name: str, seed: int = 0) -> BasePolicy:
    """A fresh built-in policy by name."""
    from mdbench.errors import InputError

    if name not in POLICIES:
        raise InputError(f"unknown policy '{name}'; built-ins: {sorted(POLICIES)} (or use --policy-cmd)")
    return POLICIES[name](seed)

