"""Generate a full-size file in the Precursor Genome layout (made-up values, the published shape and counts).

The layout is :data:`mdbench.sdl.precursor_genome.LAYOUT`; the counts are those independent public readers
report for the archive: 46 precursors → all 1,035 unordered pairs; categories completely_reacted 143,
transformed 384, partially_reacted 113, unreacted 369; 26 physical failures (no category,
``phases_unavailable_reason: physical_failure``, scans present); 1,351 XRD scans, every sample with >= 1;
1,950 refinement cases. Values (formulas, temperatures, weights) are invented: this tests the loader on the
real shape at the real size, never the chemistry.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

COUNTS = {"completely_reacted": 143, "transformed": 384, "partially_reacted": 113, "unreacted": 369}
N_FAIL, N_SCANS, N_CASES = 26, 1351, 1950
ELEMENTS = ["Li", "Na", "K", "Mg", "Ca", "Sr", "Ba", "Ti", "V", "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn", "Al",
            "Ga", "In", "Y", "Zr", "Nb", "Mo", "W", "La", "Ce", "Bi", "Sn", "Sb", "Ag", "B", "Si", "P", "Ge", "Ta",
            "Hf", "Sc", "Nd", "Gd", "Te", "Se", "Rb", "Cs", "Pb", "Cd", "In"]


def precursors() -> list[str]:
    """46 distinct made-up precursor formulas."""
    out = []
    for k, el in enumerate(ELEMENTS):
        f = f"{el}{['O', 'CO3', 'NO3', 'OH', 'PO4'][k % 5]}"
        while f in out:
            f += "x"
        out.append(f)
    return out


def make_pg_record(seed: int = 0) -> dict:
    """The whole file as a dict (see module docstring)."""
    rng = np.random.default_rng(seed)
    pairs = list(itertools.combinations(precursors(), 2))
    assert len(pairs) == 1035
    labels = [c for c, n in COUNTS.items() for _ in range(n)] + [None] * N_FAIL
    rng.shuffle(labels)
    extra_scans = np.zeros(len(pairs), int)
    extra_scans[rng.choice(len(pairs), N_SCANS - len(pairs), replace=False)] = 1
    scans_total = len(pairs) + int(extra_scans.sum())
    case_counts = np.ones(scans_total, int)
    valid_scans = np.arange(scans_total)
    # distribute the remaining cases over scans
    for j in rng.choice(valid_scans, N_CASES - scans_total, replace=True):
        case_counts[j] += 1
    samples, s_idx = [], 0
    for i, ((p1, p2), cat) in enumerate(zip(pairs, labels)):
        scans = []
        for _ in range(1 + extra_scans[i]):
            cases = []
            for k in range(case_counts[s_idx]):
                manual = k == 1
                case = {"phase_weights": {p1: round(float(rng.uniform(0, 0.6)), 3), "product": 0.4},
                        "rwp": round(float(rng.uniform(5, 25)), 2), "origin": "manual" if manual else "automated_db",
                        "rank": -1 if manual else k}
                if manual or rng.uniform() < 0.3:
                    case["verification"] = {"is_accepted": bool(rng.uniform() < 0.8),
                                            "human_quality_score": int(rng.integers(1, 4)),
                                            "history": [{"action": "verified"}]}
                cases.append(case)
            scans.append({"filename": f"PG_{i:04d}_{len(scans)}.xrdml",
                          "status": "invalid" if cat is None else "valid",
                          "xrd_settings": {"range_2theta": [10, 80]}, "refinement_cases": cases})
            s_idx += 1
        samples.append({
            "sample_id": f"PG_{i:04d}", "precursors": [{"formula": p1}, {"formula": p2}],
            "target_compound": f"{p1}-{p2}",
            "synthesis": {"heating_temperature": float(rng.choice([600, 700, 800, 900])),
                          "heating_time": float(rng.choice([60, 240, 480]))},
            "reaction_energy_ev_per_atom": round(float(rng.normal(-0.05, 0.05)), 4),
            "physical_failure": {"stage": "heating", "description": "crucible spill"} if cat is None else None,
            "outcome": {"reaction_category": cat, "phases_unavailable_reason": "physical_failure" if cat is None
                        else None},
            "active_scan_index": 0, "characterization": {"xrd": {"scans": scans}}})
    return {"format_note": "generated in the published layout; made-up values, not real data", "samples": samples}


def write_pg_record(path: Path, seed: int = 0) -> Path:
    path.write_text(json.dumps(make_pg_record(seed)), encoding="utf-8")
    return path
