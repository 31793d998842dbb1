"""Issue 18: a reported D or diagnostic against the MSD the run recorded behind it.

The honest tiny run (``_runbuilder``) records the whole-interval MSD behind each D in one of the ways runs do
(:data:`_runbuilder.MSD_FORMATS`: a GROMACS-style .xvg, a CSV beside the results, the curve inline). Each test
derives a defective run directory from it, with the species and magnitudes drawn from the suite's seed, and
checks the items and the class the audit assigns: a D that does not follow from its own curve (A3), a β its
curve contradicts (A5), a curve that disagrees with the trajectory by a constant factor (A3) or by its time
dependence (another frame, wrapped coordinates: A4), and hostile curve files (one finding, no crash).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import _runbuilder as rb
import numpy as np
import pytest
from _audit_helpers import edit_results, judgment, reanalysed, saeo, state

from _testseed import seed_for
from mdbench.audit import audit_run
from mdbench.audit.transport import curve_diffusion

CASE = rb.CASE
pytestmark = pytest.mark.gromacs
RNG = random.Random(seed_for("audit/recorded-curves"))
SPECIES = ("na", "cl", "sol")


def _codes(doc: dict, code: str) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == code]


def _factor(lo: float, hi: float) -> float:
    f = RNG.uniform(lo, hi)
    return f if RNG.random() < 0.5 else 1.0 / f


def _curve(run: Path, doc: dict, sp: str) -> tuple[np.ndarray, np.ndarray]:
    """The MSD the honest run recorded for species ``sp`` (lag [ps], MSD [nm^2])."""
    ent = doc["observables"]["self_diffusion"][f"D_{sp}"]
    if "curves" in ent:
        return np.asarray(ent["curves"]["lag_ps"]), np.asarray(ent["curves"]["msd_nm2"])
    path = run / ent["msd_file"] if "/" in ent["msd_file"] else run / "analysis" / CASE / ent["msd_file"]
    x = np.loadtxt(path, comments=("#", "@", "lag"), delimiter="," if path.suffix == ".csv" else None)
    return x[:, 0], x[:, 1]


def _replace_curve(run: Path, doc: dict, sp: str, lag: np.ndarray, msd: np.ndarray, *, consistent: bool) -> None:
    """Record ``msd`` as species ``sp``'s curve (in its format); with ``consistent`` the reported D, blocks, β and
    regime check follow from it (an agent that fitted a wrong curve correctly)."""
    ent = doc["observables"]["self_diffusion"][f"D_{sp}"]
    if "curves" in ent:
        ent["curves"] = {"lag_ps": [float(x) for x in lag], "msd_nm2": [float(x) for x in msd]}
    else:
        name = ent["msd_file"].rsplit("/", 1)[-1]
        rb.write_msd(run / "analysis" / CASE / name, rb.MSD_FORMATS[sp], lag, msd, sp.upper())
    if consistent:
        D, beta, _n = curve_diffusion(lag, msd, tuple(ent["fit_window_ps"]))
        f = D / ent["value"]
        ent["value"], ent["blocks"], ent["beta"] = D, [b * f for b in ent["blocks"]], beta
        checks = ent["diagnostics"]["sampling_checks"]
        for k in checks:
            if "diffusive" in k:
                checks[k] = bool(0.9 <= beta <= 1.1)



# --------------------------------------------------------------------------------------- honest
def test_honest_recorded_curves_are_read_and_agree(built, tmp_path):
    """Every format the honest run uses is read (no finding), its D follows from its curve and its curve agrees
    with the trajectory's MSD."""
    res, doc = reanalysed(built[0], built[1], tmp_path / "h")
    checks = [c for o in res.observables if o.observable == "self_diffusion" for c in o.checks]
    agree = [c.message for c in checks if c.code == "agrees_with_recorded_curve"]
    for sp in SPECIES:
        assert any(f"D_{sp}: D follows from its recorded MSD" in m for m in agree), agree
        assert any(f"D_{sp}: its recorded MSD" in m and ": agree" in m for m in agree), agree
    assert not _codes(doc, "recorded_curve_unusable")
    assert not [c for c in checks if "recorded MSD" in c.message and c.severity != "note"]
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1
    assert judgment(doc, "A4", CASE, "self_diffusion")["rating"] == 1


# --------------------------------------------------------------------------------------- D against its own curve
def test_reported_D_not_following_from_its_recorded_MSD_is_A3(run_copy, bundle, tmp_path):
    """No reanalysis needed: D is re-fitted from the run's own curve on its own window by the project's fit."""
    sp, f = RNG.choice(SPECIES), _factor(1.3, 3.0)

    def plant(doc):
        ent = doc["observables"]["self_diffusion"][f"D_{sp}"]
        ent["value"] *= f
        ent["blocks"] = [b * f for b in ent["blocks"]]

    edit_results(run_copy, plant)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    assert state(doc, CASE, "self_diffusion") == "F"
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 0
    found = [x for x in _codes(doc, "value_contradicts_reanalysis") if f"D_{sp}" in x["message"]
             and "recorded MSD" in x["message"]]
    assert found and found[0]["item"] == "A3", doc["findings"]
    assert "reported" in found[0]["message"] and "gives" in found[0]["message"]       # both numbers
    others = [x for x in _codes(doc, "value_contradicts_reanalysis") if f"D_{sp}" not in x["message"]]
    assert not others                                                                  # the honest species pass


def test_reported_beta_its_recorded_MSD_contradicts_is_A5_zero(run_copy, bundle, tmp_path):
    """A window in the ballistic start of the MSD reported as diffusive: the run's own curve says β ≈ 2."""
    sp = RNG.choice(SPECIES)

    def window(doc):
        ent = doc["observables"]["self_diffusion"][f"D_{sp}"]
        dt = 0.02
        ent["fit_window_ps"] = [dt, RNG.choice([2, 3]) * dt]
        ent["beta"] = RNG.uniform(0.95, 1.05)
        ent["diagnostics"]["sampling_checks"] = {k: True for k in ent["diagnostics"]["sampling_checks"]}

    edit_results(run_copy, window)
    audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    a5 = judgment(doc, "A5", CASE, "self_diffusion")
    assert a5["rating"] == 0 and "recorded MSD" in a5["reason"], a5
    assert [x for x in _codes(doc, "diagnostic_contradicts_evidence") if x["item"] == "A5"
            and "recorded MSD" in x["message"] and f"D_{sp}" in x["message"]]


# --------------------------------------------------------------------------------------- curve against trajectory
# a constant factor (units, normalisation) is an implementation fault; another time dependence (COM drift left in,
# wrapped coordinates) a trajectory-treatment fault. The solvent's MSD is precise even on the tiny run; 4 ions'
# MSD is not, so an ion's curve is planted in Å^2 labelled nm^2 (a factor 100).
@pytest.mark.parametrize("how", ["factor", "angstrom", "drift", "wrapped"])
def test_recorded_MSD_contradicting_the_trajectory_is_classified(run_copy, bundle, tmp_path, how):
    sp = RNG.choice(("na", "cl")) if how == "angstrom" else "sol"
    doc0 = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())
    lag, msd = _curve(run_copy, doc0, sp)
    w = doc0["observables"]["self_diffusion"][f"D_{sp}"]["fit_window_ps"]
    m_hi = float(np.interp(w[1], lag, msd))
    if how == "factor":
        planted = msd * _factor(1.6, 3.0)
    elif how == "angstrom":
        planted = msd * 100.0
    elif how == "drift":        # |ΔR_COM|² = (v t)² added, U(1, 2) × the MSD at the window's end
        planted = msd + RNG.uniform(1.0, 2.0) * m_hi * (lag / w[1]) ** 2
    else:                       # wrapped coordinates: the MSD saturates near the window's start
        c = RNG.uniform(1.0, 2.0) * float(np.interp(w[0], lag, msd))
        planted = c * (1.0 - np.exp(-msd / c))
    edit_results(run_copy, lambda d: _replace_curve(run_copy, d, sp, lag, planted, consistent=True))
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    treatment = how in ("drift", "wrapped")
    code = "trajectory_treatment_differs" if treatment else "value_contradicts_reanalysis"
    found = [x for x in _codes(doc, code) if f"D_{sp}" in x["message"] and "recorded MSD" in x["message"]]
    assert found and found[0]["item"] == ("A4" if treatment else "A3"), doc["findings"]
    assert "trajectory" in found[0]["message"] and "recorded" in found[0]["message"]
    assert state(doc, CASE, "self_diffusion") == "F"
    # D follows from its (wrong) curve: no "does not follow" finding
    assert not [x for x in _codes(doc, "value_contradicts_reanalysis") if "does not follow" in x["message"]]
    if treatment:
        assert judgment(doc, "A4", CASE, "self_diffusion")["rating"] == 0
        assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1    # the treatment, not the estimator
        assert ("faster" if how == "drift" else "slower") in found[0]["message"]
    else:
        assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 0


# --------------------------------------------------------------------------------------- hostile curve files
@pytest.mark.parametrize("how", ["symlink_out", "symlink_in", "fifo", "malformed", "too_large", "climbing", "missing",
                                 "ambiguous"])
def test_hostile_recorded_curve_is_one_finding_and_nothing_else_breaks(run_copy, bundle, tmp_path, how):
    sp = RNG.choice(("na", "cl"))
    d = run_copy / "analysis" / CASE
    name = f"msd_{sp}.{rb.MSD_FORMATS[sp]}"
    target = d / name
    cite = f"analysis/{CASE}/{name}"
    if how == "symlink_out":
        target.unlink()
        os.symlink("/etc/passwd", target)
    elif how == "symlink_in":        # a link that stays inside the run is not followed either
        (d / "real.csv").write_text("lag_ps,msd_nm2\n0,0\n0.1,1\n0.2,2\n")
        target.unlink()
        os.symlink("real.csv", target)
    elif how == "fifo":
        target.unlink()
        os.mkfifo(target)              # reading it would block forever
    elif how == "malformed":
        target.write_text(target.read_text() + "0.5 <script>alert(1)</script>\n")
    elif how == "too_large":
        with open(target, "a") as fh:
            fh.write("# padding\n" * (rb_max_bytes() // 10 + 10))
    elif how == "climbing":
        cite = "../../../etc/passwd.csv"
    elif how == "missing":
        cite = f"analysis/{CASE}/no_such_msd.xvg"
    else:
        target.write_text("lag_ps,msd_a_nm2,msd_b_nm2\n0,0,0\n0.1,1,2\n0.2,2,4\n")

    def recite(doc):
        doc["observables"]["self_diffusion"][f"D_{sp}"]["msd_file"] = cite

    edit_results(run_copy, recite)
    res = audit_run(run_copy, bundle, tmp_path / "a", reanalysis=False)
    doc = saeo(tmp_path / "a")
    about = [f for f in doc["findings"] if f["code"] in ("recorded_curve_unusable", "symlink_not_followed",
                                                         "symlink_escape", "unreadable", "file_too_large",
                                                         "path_outside_run") and (name in (f.get("path") or "")
                                                                                 or "passwd" in (f.get("path") or "")
                                                                                 or "no_such" in (f.get("path") or ""))]
    assert len(about) >= 1, doc["findings"]
    assert len({(f["code"], f.get("path")) for f in about}) == len(about)              # no repeats
    checks = [c for o in res.observables if o.observable == "self_diffusion" for c in o.checks]
    assert not [c for c in checks if f"D_{sp}" in c.message and "recorded MSD" in c.message]   # not used
    # the other species' curves are still read and the rest of the audit ran
    other = next(s for s in SPECIES if s != sp)
    assert any(f"D_{other}: D follows from its recorded MSD" in c.message for c in checks)
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1
    assert "<script>" not in (tmp_path / "a/findings.md").read_text()


def rb_max_bytes() -> int:
    from mdbench.audit.runread import MAX_CURVE_BYTES

    return MAX_CURVE_BYTES
