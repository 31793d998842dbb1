"""No copied rule: a physical constant, the t+ / Σ z z L algebra and the block half-width are each defined once in
lib/ (the analysis' units, onsager and blocks modules); the audit calls them."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np

from mdbench.analysis import units
from mdbench.analysis.blocks import block_estimate
from mdbench.audit import consistency, rulebook
from mdbench.audit.codes import GroupCheck
from mdbench.audit.runread import as_entry

LIB = Path(__file__).resolve().parents[2] / "lib"
HOME = {"constants": LIB / "mdbench" / "analysis" / "units.py", "algebra": LIB / "mdbench" / "analysis" / "onsager.py"}
CONSTANTS = {name: getattr(units, name) for name in ("KB_J_PER_K", "E_CHARGE_C", "AVOGADRO_PER_MOL",
                                                     "FARADAY_C_PER_MOL")}
#: Copies outside the audit and analysis rooms, each a request to its owner (the entry must go when the copy
#: goes: the test fails on an entry whose file no longer holds a copy).
PENDING_OUTSIDE_ROOM = {
    "mdbench/report/explore.py": "KB_J_PER_K",
    "mdbench/episode/defects.py": "KB_J_PER_K",
    "mdbench/inputs/units.py": "AVOGADRO_PER_MOL",
}
#: a ± b ± 2·(…)L+- — the 1:1 denominator of t+ or Σ z_i z_j L^ij written out by hand.
ALGEBRA = re.compile(r"\b\w+\s*\+\s*\w+(?:\s*\*\s*\w+)*\s*[-+]\s*2(?:\.0)?\s*\*\s*(?:\w+\s*\*\s*)*\w*(?:pm|Lpm)\b")


def _constant_copies() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in sorted(LIB.rglob("*.py")):
        if f == HOME["constants"]:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value != 0:
                for name, v in CONSTANTS.items():
                    if math.isclose(node.value, v, rel_tol=1e-6):
                        out.setdefault(str(f.relative_to(LIB)), set()).add(name)
    return out


def test_a_physical_constant_is_defined_once():
    copies = _constant_copies()
    unexpected = {f: n for f, n in copies.items() if f not in PENDING_OUTSIDE_ROOM}
    assert not unexpected, f"physical constants copied instead of imported from mdbench.analysis.units: {unexpected}"
    gone = [f for f, name in PENDING_OUTSIDE_ROOM.items() if name not in copies.get(f, set())]
    assert not gone, f"these copies are gone: remove them from PENDING_OUTSIDE_ROOM: {gone}"


def test_the_tplus_and_sigma_algebra_is_written_once():
    hits = []
    for f in sorted(LIB.rglob("*.py")):
        if f == HOME["algebra"]:
            continue
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if ALGEBRA.search(line.split("#", 1)[0]):
                hits.append(f"{f.relative_to(LIB)}:{i}: {line.strip()}")
    assert not hits, f"t+ / Σ z z L written out by hand instead of calling mdbench.analysis.onsager: {hits}"


def test_the_scan_sees_the_copies_it_forbids():
    assert ALGEBRA.search("den_c, den_m = pp + mm - 2.0 * lpm, pp + mm + 2.0 * lpm")
    assert ALGEBRA.search("full = zp * zp * pp + zm * zm * mm + 2.0 * zp * zm * lpm")
    assert not ALGEBRA.search("out = (head + tail - 2.0 * S2) / (n_w - m) / n_mol")  # an MSD, not t+


def test_the_audits_tplus_is_the_rulebooks_in_every_convention():
    rng = np.random.default_rng(7)
    for _ in range(20):
        pp, mm = rng.uniform(0.5, 2.0, 2)
        pm = rng.uniform(-0.4, 0.4)
        conv = rulebook.tplus_conventions(pp, mm, pm)
        for value, want in ((conv["correct"], None), (conv["mixed"], "tplus_mixed_convention")):
            e = as_entry("observables.transference/t_plus", {"value": value, "onsager": {
                "L_pp": pp, "L_mm": mm, "L_pm": pm, "unit": "1/(J m s)"}})
            got = consistency._tplus_checks("W", e, consistency._onsager(e.raw))
            if want is None or abs(conv["mixed"] - conv["correct"]) < 0.02 * abs(conv["correct"]) + 0.005:
                assert want is None or not got or got[0].check.code == want
                if want is None:
                    assert got == []
            else:
                assert [x.check.code for x in got] == [want]
                assert isinstance(got[0], GroupCheck) and got[0].caps == {"A2": 0.0}


def test_whole_versus_blocks_uses_the_analysis_half_width_for_any_number_of_blocks():
    """One half-width rule: t(0.975, n−1) s / √n (analysis.blocks.block_estimate), also for n ≠ 4 (the audit used
    a factor 2.0 there). A whole value just inside that band passes; just outside it is a finding."""
    for blocks in ([1.0, 1.2, 0.9, 1.1], [1.0, 1.3, 0.8], [1.0, 1.2, 0.9, 1.1, 1.05, 0.95]):
        hi = max(blocks) + block_estimate(1.0, blocks, "").half_width_95
        for outside, sign in ((False, 0.99), (True, 1.01)):
            # the slack is REL_TOL of the larger of the block mean and the whole value (here the whole value)
            whole = hi / (1.0 - consistency.REL_TOL * sign)
            e = as_entry("observables.temperature", {"value": whole, "blocks": blocks})
            got = consistency._whole_vs_blocks("W", "thermodynamics", e)
            assert bool(got) is outside, (blocks, whole, hi)
