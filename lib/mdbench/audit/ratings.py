"""The A2-A7 ratings of one group from the codes of its checks.

Split from :mod:`mdbench.audit.analysis_items` (which re-exports every name).
"""

from __future__ import annotations

from typing import Any

from mdbench.audit.canonical import state_consistency
from mdbench.audit.codes import REGIME_CODES, is_regime_check
from mdbench.audit.model import Check
from mdbench.audit.runread import (
    Entry,
)
from mdbench.audit.sampling import _own_checks


def _diag_keys(ent: Entry) -> set[str]:
    """Keys of an entry and of its ``diagnostics``/``window``/``details`` blocks, plus definition words."""
    keys = {str(k).lower() for k in ent.raw}
    for sub in ("diagnostics", "window", "details"):
        if isinstance(ent.raw.get(sub), dict):
            keys |= {str(k).lower() for k in ent.raw[sub]}
    d = str(ent.raw.get("definition", "")).lower()
    keys |= {w for w in ("frame", "barycentric", "unwrapped", "pbc", "minimum image", "periodic", "com")
             if w in d}
    return keys


def _a4(g: Any, checks: list[Check], keys: set[str], usable: list[Entry], prod_state: dict[str, float] | None,
        compared: int, implementation: list[str]) -> tuple[float | None, str]:
    """A4 (trajectory / pressure-tensor treatment) from the checks and the keys the results declare."""
    treatment = [c.message for c in checks if c.code == "trajectory_treatment_differs"]
    ratings: dict[str, tuple[float | None, str]] = {}
    inconsistent = (state_consistency(usable, prod_state) if g.regime else []) + treatment
    frame = [c.message for c in checks if c.code == "frame_differs_from_registration"]
    if inconsistent:
        ratings["A4"] = (0.0, "; ".join(inconsistent + frame))
    elif frame:
        ratings["A4"] = (0.5, "; ".join(frame))
    elif g.treatment == "pressure_tensor":
        declared = keys & {"ensemble", "barostat", "volume_nm3", "temperature_k", "pressure_interval_ps"}
        ratings["A4"] = (1.0, f"pressure-tensor treatment declared ({', '.join(sorted(declared))})") if declared \
            else (0.5, "ensemble/volume of the pressure-tensor window not declared with the result")
    elif g.treatment == "trajectory":
        declared = keys & {"frame", "reference_frame", "unwrapped", "unwrap", "com", "pbc", "volume_nm3",
                           "temperature_k", "molecular_com", "whole_molecules", "barycentric", "minimum image",
                           "periodic"}
        if declared:
            ratings["A4"] = (1.0, f"trajectory treatment declared ({', '.join(sorted(declared))})")
        elif compared and not implementation:
            ratings["A4"] = (1.0, "values agree with the canonical reanalysis (PBC handled consistently)")
        else:
            ratings["A4"] = (0.5, "trajectory treatment (PBC/unwrapping/frame/volume) not declared with the result")
    else:
        ratings["A4"] = (1.0, "energy-file time series; no trajectory treatment needed")
    return ratings["A4"]


def _a5(g: Any, checks: list[Check], keys: set[str], usable: list[Entry]) -> tuple[float | None, str]:
    """A5 (regime / plateau diagnostics) from the checks and the keys the results declare."""
    ratings: dict[str, tuple[float | None, str]] = {}
    if g.regime:
        diag = {k for k in keys if any(w in k for w in ("beta", "msd_exponent", "fit_window", "plateau",
                                                         "running_integral", "regime", "window_ps", "lo_ps"))}
        diag |= {k for e in usable for k in _own_checks(e, g.name) if is_regime_check(k)}
        contradicted = [c.message for c in checks if c.code == "diagnostic_contradicts_evidence"]
        unmet = [c.message for c in checks if c.code in REGIME_CODES and c.code != "diagnostic_contradicts_evidence"]
        if not diag:
            ratings["A5"] = (0.0, "a fitted number alone: no regime/plateau diagnostic reported")
        elif contradicted:
            ratings["A5"] = (0.0, "reported regime diagnostic contradicted by the evidence: " + "; ".join(contradicted))
        elif unmet:
            ratings["A5"] = (0.5, "regime diagnostic reported and it says the regime was not reached: "
                             + "; ".join(unmet))
        else:
            ratings["A5"] = (1.0, f"regime diagnostic reported ({', '.join(sorted(diag))})")
    else:
        ratings["A5"] = (None, "no fitting regime for this observable")
    return ratings["A5"]


def _ratings(g: Any, checks: list[Check], regs: list[dict], usable: list[Entry],
             prod_state: dict[str, float] | None) -> dict[str, tuple[float | None, str]]:
    """A2–A7 of one group from the codes of its checks (rules in the module docstring)."""
    def said(*severities: str) -> list[str]:
        return [c.message for c in checks if c.severity in severities]

    codes = {c.code for c in checks}
    definition, implementation, sampling = said("definition"), said("implementation"), said("sampling")
    compared = sum(c.code in ("agrees_with_canonical", "outside_canonical_r5", "value_contradicts_reanalysis",
                              "trajectory_treatment_differs") for c in checks)
    implementation = [c.message for c in checks if c.severity == "implementation"
                      and c.code != "trajectory_treatment_differs"]
    late = [c.message for c in checks if c.code == "registered_after_results"]
    ratings: dict[str, tuple[float | None, str]] = {}
    if definition:
        ratings["A2"] = (0.0, "; ".join(definition))
    elif g.definition_words and not regs:
        ratings["A2"] = (0.5, "definition not registered in registrations.jsonl")
    elif late:
        ratings["A2"] = (0.5, "; ".join(late))
    else:
        ratings["A2"] = (1.0, "definition answers the physical question" + (f" (registered {regs[0].get('id')})"
                                                                          if regs else ""))
    if implementation:
        ratings["A3"] = (0.0, "; ".join(implementation))
    elif definition:
        ratings["A3"] = (0.0, "estimator implements a wrong definition")
    elif compared:
        ratings["A3"] = (1.0, f"{compared} value(s) agree with the canonical reanalysis (R5)")
    else:
        ratings["A3"] = (1.0, "no numerical fault found (not reanalysed)")
    keys = set().union(*(_diag_keys(e) for e in usable))
    ratings["A4"] = _a4(g, checks, keys, usable, prod_state, compared, implementation)
    ratings["A5"] = _a5(g, checks, keys, usable)
    if any(c.code == "nonfinite_blocks" for c in checks):
        ratings["A6"] = (0.0, "non-finite block values prevent the block-stability assessment")
    elif "four_block_analysis_missing" in codes:
        ratings["A6"] = (0.0, "four-block analysis missing")
    elif sampling:
        ratings["A6"] = (0.5, "blocks examined; sampling insufficient: " + "; ".join(sampling))
    elif "value_withheld" in codes:
        ratings["A6"] = (0.5, "value withheld with a stated reason (not estimable from these blocks)")
    else:
        ratings["A6"] = (1.0, "whole-interval and four block values finite and consistent")
    unc = [e for e in usable if e.has_uncertainty()]
    defined = [e for e in unc if isinstance(e.raw.get("uncertainty"), dict) and e.raw["uncertainty"].get("definition")]
    if len(defined) == len(usable):
        ratings["A7"] = (1.0, "uncertainty reported with its definition")
    elif unc:
        ratings["A7"] = (0.5, "uncertainty reported for some targets or without a definition")
    else:
        ratings["A7"] = (0.0, "no uncertainty reported")
    return ratings
