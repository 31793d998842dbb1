"""The definitions registered in the run record before any result: the shared ones, then each estimator's own.

Every registration kind is a dict of texts and values read from :class:`AnalysisSettings`. The kinds shared
by every estimator — the guard and blocks, the atom selections, the adequacy and stopping rules — are
written here; each estimator writes its own in its ``definition`` hook (:meth:`EstimatorBase.definition
<mdbench.analysis.estimator.EstimatorBase.definition>`: the RDF/coordination rule in :mod:`mdbench.analysis.rdf`,
the fitting rules in :mod:`mdbench.analysis.diffusion`, :mod:`mdbench.analysis.onsager` and
:mod:`mdbench.analysis.viscosity`, ...). :func:`registration_definitions` merges them.
"""

from __future__ import annotations

import importlib
from typing import Any

from mdbench.analysis.blocks import BLOCK_DEFINITION
from mdbench.analysis.observables import REGISTRY
from mdbench.analysis.reduce import SITE_LABELS
from mdbench.analysis.settings import AnalysisSettings
from mdbench.analysis.states import STATE_RULES

#: The kinds in the order a run registers them (its registration ids follow this order, so it never changes);
#: a kind defined later by a new estimator is registered after these, in registry order.
REGISTRATION_ORDER = ("analysis_guard_and_blocks", "analysis_atom_selections", "analysis_rdf_coordination",
                      "analysis_contacts_clusters", "analysis_fitting_rules", "analysis_shell_dynamics",
                      "analysis_adequacy_and_stopping")


def registration_definitions(settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """The definitions registered before any result, keyed by registration kind (all read from ``settings``):
    the shared ones (:func:`shared_definitions`) and each registered estimator's own (its ``definition``
    hook), merged in registry order; kinds in :data:`REGISTRATION_ORDER`."""
    out: dict[str, dict[str, Any]] = {kind: {} for kind in REGISTRATION_ORDER}
    out.update(shared_definitions(settings))
    for path in dict.fromkeys(e.estimator for e in REGISTRY):
        module, _, name = path.partition(":")
        own = getattr(getattr(importlib.import_module(module), name), "definition", None)
        for kind, fields in (own(settings) if own is not None else {}).items():
            out.setdefault(kind, {}).update(fields)
    return {kind: fields for kind, fields in out.items() if fields}


def shared_definitions(s: AnalysisSettings) -> dict[str, dict[str, Any]]:
    """The kinds every estimator follows: guard and blocks, atom selections, adequacy and stopping rules."""
    adequacy = {k: getattr(s, k) for k in AnalysisSettings.sections()["adequacy"]}
    return {
        "analysis_guard_and_blocks": {
            "guard_ps": s.guard_ps,
            "guard_rule": ("given guard_ps" if s.guard_ps is not None else
                           "latest pymbar detect_equilibration t0 (coarse origin grid) over Potential and, "
                           "when present, Density of the energy file; one guard for every analysis"),
            "n_blocks": s.n_blocks, "uncertainty": BLOCK_DEFINITION,
        },
        "analysis_atom_selections": {
            "molecule": "GROMACS molecule (tpr molnums), species = residue name of its first atom",
            "centres": "atoms of species with positive net molecular charge (cations, e.g. LI)",
            "neutral_species": f"net molecular charge |q| < {s.neutral_charge_tolerance_e:g} e counts as 0 e "
                               "(rounded partial charges of a neutral solvent)",
            "neutral_charge_tolerance_e": s.neutral_charge_tolerance_e,
            "site_labels": SITE_LABELS,
            "site_rule": "labels from elements and bonds of the tpr, not from atom names",
            "com": "centre of mass of the whole molecule (atoms minimum-imaged to the first atom), float64",
            "unwrapping": "displacement scheme with minimum image in the current box (NPT-safe)",
        },
        "analysis_adequacy_and_stopping": {
            "state_rules": STATE_RULES,
            "thresholds": adequacy,
            "precision_rule": "C needs the whole-interval 95 % half-width (block spread) <= the registered "
                              "relative bound x |value| (t+, ionicity, class fractions: <= the absolute bound; "
                              "CN: relative or absolute), else SI with the numbers",
            "trend_rule": "C needs no significant trend over the blocks: OLS slope of the block values "
                          f"against the block index with two-sided p >= {s.block_trend_alpha:g} "
                          "(Student t, n-2 dof), else SI",
            "not_estimable_rule": "a ratio whose defining denominator is zero within its 95 % interval and that "
                                  "interval is resolved (sigma for t+: |sigma| + half-width <= ionicity bound x "
                                  "sigma_NE; eta: a non-positive Green-Kubo plateau) is not_estimable: value "
                                  "withheld, reason stated; a denominator that is merely imprecise is SI",
            "stopping_rule": "the analysis never extends sampling; an observable failing a sampling check "
                             "is reported SI with the check named; extension is decided by the study "
                             "within the remaining budget",
        },
    }
