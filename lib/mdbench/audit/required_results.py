"""A1 from the task's specification: the required results of each case, and the run's results against them.

The list is derived from the frozen inputs only — the registry of required observables
(:data:`mdbench.analysis.observables.REGISTRY`: ``required`` families and their per-case targets) and the
bundle's case files (``required_targets`` replaces the registry's targets of a group) — never from the run:

* every required family with per-case targets gives one entry per target (LHCE: the coordination number of
  each of its three Li–O channels, D of each of its four species, the CIP and AGG fractions, each
  thermodynamic term);
* a required family without targets of its own in a group whose target family declares channels takes those
  channels (the RDF of each Li–O channel beside its CN); where the bundle fixes the group's targets itself,
  only the target family is required;
* a family with a fixed member gives that member (σ with cross-correlations, not σ_NE); the others one
  entry (the correlated t+, η).

A result delivers an entry when it belongs to that family (its ``category``, its registry name, or for
other tools' spellings its name: an RDF, a Yeh–Hummer D, a residence time or a speciation fraction is never
the CN or D it sits beside), names the target, and carries its whole value with four block values (a value
withheld with a stated reason counts as delivered: its state is judged elsewhere).

A required entry nothing delivers is ``required_result_missing`` (severity ``missing``): the group's state
becomes M and A1 is capped at ½ with the list of what is missing. Cost: one pass over the results entries.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from mdbench.analysis.blocks import N_BLOCKS
from mdbench.analysis.observables import RDF, REGISTRY, audit_group, family
from mdbench.analysis.states import M
from mdbench.audit.codes import CODES, rule
from mdbench.audit.model import Check, Evidence, Finding, Judgment, cap
from mdbench.audit.runread import Entry, group_entries, match_target, target_entries_first, tokens

#: Words of another tool's result name that make it an RDF (beside the registry's name of the RDF family).
_RDF_WORDS = frozenset({"gr", "minimum", "rmin"})


@dataclass(frozen=True)
class RequiredResult:
    """One result the task requires of a case.

    Attributes
    ----------
    case : str
    group : str
        Audit group (seed Table 2: ``coordination``, ``self_diffusion``…).
    family : str
        Registry family that delivers it (``rdf``, ``coordination``, ``conductivity``…).
    target : str or None
        Channel, species or member (``li_o_tte_ether``, ``tte``, ``sigma``); None: the family's one value.
    source : str
        Where the requirement comes from (``registry`` or the bundle's case file).
    by_target : bool
        A result must name ``target`` (a channel or species); False: any result of the family delivers it
        (a fixed member such as σ, which other tools write as the family's one value).
    """

    case: str
    group: str
    family: str
    target: str | None
    source: str
    by_target: bool = True

    def label(self) -> str:
        return f"{self.family}/{self.target}" if self.target else self.family

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def required_results(case: str, bundle: Any = None) -> list[RequiredResult]:
    """The required results of ``case`` (module docstring), from the registry and the bundle's case file."""
    cdef = getattr(bundle, "cases", {}).get(case) if bundle is not None else None
    override = dict(cdef.required_targets or {}) if cdef is not None else {}
    source = f"bundle:{cdef.source}" if cdef is not None else "registry"
    required = [e for e in REGISTRY if e.required]
    out: list[RequiredResult] = []
    for e in required:
        g = e.audit_group
        declaring = [x for x in required if x.audit_group == g and x.targets_for(case)]
        if g in override:  # the bundle fixes the group's targets: its target family delivers them
            owner = next((x for x in required if x.audit_group == g and x.targets), None)
            if e is owner:
                out += [RequiredResult(case, g, e.name, str(t), source) for t in override[g]]
            elif owner is None:
                out.append(RequiredResult(case, g, e.name, None, source, by_target=False))
            continue
        own = e.targets_for(case)
        if own:
            out += [RequiredResult(case, g, e.name, t, "registry") for t in own]
        elif declaring and declaring[0] is not e:  # the RDF of each channel the CNs are required for
            out += [RequiredResult(case, g, e.name, t, "registry") for t in declaring[0].targets_for(case)]
        else:
            fixed = [m.pattern for m in e.members if m.fixed]
            out.append(RequiredResult(case, g, e.name, fixed[0] if fixed and e.placeholders else None, "registry",
                                      by_target=False))
    return out


def _additional_families() -> list[Any]:
    """The registry's families the seed does not require (additional results, never a required one)."""
    return [e for e in REGISTRY if not e.required]


def _distinctive(e: Any) -> set[str]:
    """The words of an additional family's name that no required family's name has (``yeh``, ``hummer``)."""
    return tokens(e.name) - set().union(*(tokens(x.name) for x in REGISTRY if x.required)) or {e.name}


def _entry_family(path: str, ent: Entry, group: str) -> str:
    """The registry family a result entry belongs to (category, registry name, else its words)."""
    cat = ent.raw.get("category") if isinstance(ent.raw, dict) else None
    name = re.sub(r"^(observables|results)\.", "", path)
    fam = family(name)
    if fam is not None and (not isinstance(cat, str) or fam.category == cat.lower()):
        return fam.name
    if isinstance(cat, str):
        for e in REGISTRY:
            if e.category == cat.lower():
                return e.name
    words = tokens(path)
    for e in _additional_families():  # a Yeh–Hummer D, a residence time, a speciation fraction …
        if e.audit_group == group and _distinctive(e) <= words:
            return e.name
    if words & (_RDF_WORDS | {RDF.name}):
        return RDF.name
    declaring = [e for e in REGISTRY if e.required and e.audit_group == group and e.targets]
    return declaring[0].name if declaring else next((e.name for e in REGISTRY if e.audit_group == group), group)


def _complete(ent: Entry) -> bool:
    """Whole value and four block values (a withheld or 'none by rule' value counts as delivered)."""
    raw = ent.raw if isinstance(ent.raw, dict) else {}
    if ent.value is None and (ent.null_is_none or raw.get("withheld") or raw.get("reason") or raw.get("state")):
        return True
    if ent.value is None:
        return False
    return ent.blocks is not None and len(ent.blocks) >= N_BLOCKS or not math.isfinite(ent.value)


def missing_results(case: str, bundle: Any, results: Any) -> list[tuple[RequiredResult, str]]:
    """(required entry, why) for every required result of ``case`` the results document does not deliver."""
    groups = group_entries(results)
    out: list[tuple[RequiredResult, str]] = []
    for req in required_results(case, bundle):
        mine = {p: e for p, e in groups.get(req.group, {}).items() if _entry_family(p, e, req.group) == req.family}
        if req.by_target and req.target is not None:
            ent = match_target(req.group, req.target, mine)
        else:
            excluded = audit_group(req.group).excluded_tokens
            ent = next((e for p, e in target_entries_first(req.group, mine).items() if not tokens(p) & excluded),
                       None)
        if ent is None:
            out.append((req, "not delivered"))
        elif not _complete(ent):
            out.append((req, f"{ent.key} lacks its whole value or its {N_BLOCKS} block values"))
    return out


def apply(run: Any, bundle: Any, case: str, upstream: str | None, groups: list[Any],
          judgments: list[Judgment]) -> list[Finding]:
    """Coverage of ``case`` against its required results: one ``required_result_missing`` check per missing
    entry on its group (state M), A1 capped at ½ naming them; ``judgments`` amended in place."""
    if upstream is not None:
        return []
    res_rel = f"analysis/{case}/results.json"
    gaps = missing_results(case, bundle, run.results.get(case))
    if not gaps:
        return []
    by_obs = {gr.assessment.observable: gr for gr in groups}
    for req, why in gaps:
        msg = f"required {req.label()} ({req.source}): {why}"
        gr = by_obs.get(req.group)
        if gr is not None:
            a = gr.assessment
            a.checks.append(Check("required_result_missing", CODES["required_result_missing"], msg,
                                  (Evidence(res_rel, note=f"required by {req.source}"),)))
            if a.state not in (M, "invalid_upstream", "not_reached"):
                a.state, a.reason = M, f"missing: {msg}; {a.reason}"[:900]
    why = "required results missing: " + "; ".join(f"{r.label()} ({w})" for r, w in gaps)
    for i, j in enumerate(judgments):
        if j.item == "A1" and j.case == case and j.observable is None:
            judgments[i] = cap(j, rule("required_result_missing").lowers["A1"], why)
    return [Finding("required_result_missing", why[:900], res_rel, item="A1", case=case)]  # one per case
