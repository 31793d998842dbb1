"""Reading a recorded MSD the way runs write it (no GROMACS needed): formats, units, column choice, and
hostile text that never raises."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdbench.audit.runread import Entry, RunData, curve_citation, parse_curve_text, read_recorded_curve
from mdbench.audit.safeio import RunFS
from mdbench.audit.transport import compare_curves, curve_diffusion

LAG = np.arange(0, 11) * 0.5                 # ps
MSD = 6.0 * 2.0e-3 * LAG                     # nm^2: D = 2e-3 nm^2/ps = 2e-9 m^2/s


def _run(tmp_path) -> RunData:
    (tmp_path / "analysis/W").mkdir(parents=True)
    return RunData(fs=RunFS(tmp_path), cases=["W"], events=[], attempt_rows=[], attempts={}, registrations=[],
                   artifacts={}, stage_states={}, observables={}, terminal={}, results={}, report_md=None)


def _entry(**raw) -> Entry:
    return Entry("observables.self_diffusion.D_na", 2e-9, [2e-9] * 4, dict(value=2e-9, **raw))


@pytest.mark.parametrize("text,factor_lag,factor_msd", [
    ("@    xaxis  label \"Time (ps)\"\n@    yaxis  label \"MSD (nm\\S2\\N)\"\n@ s0 legend \"SOL\"\n@ s1 legend \"NA\"\n"
     + "".join(f"{t:.3f} {9 * m:.8g} {m:.8g}\n" for t, m in zip(LAG, MSD)), 1.0, 1.0),     # gmx msd, two groups
    ("lag_ns,msd_A2\n" + "".join(f"{t / 1000:.6f},{m * 100:.8g}\n" for t, m in zip(LAG, MSD)), 1.0, 1.0),
    ("# lag_ps msd_na_nm2 msd_cl_nm2\n" + "".join(f"{t} {m} {2 * m}\n" for t, m in zip(LAG, MSD)), 1.0, 1.0),
    ("".join(f"{t}\t{m}\n" for t, m in zip(LAG, MSD)), 1.0, 1.0),                            # bare: GROMACS units
])
def test_formats_units_and_the_species_column(text, factor_lag, factor_msd):
    got = parse_curve_text(text, {"na"})
    assert not isinstance(got, str), got
    lag, msd, note = got
    assert lag == pytest.approx(LAG * factor_lag, rel=1e-6, abs=1e-9)
    assert msd == pytest.approx(MSD * factor_msd, rel=1e-6, abs=1e-12)
    D, beta, n = curve_diffusion(lag, msd, (1.0, 4.0))
    assert D == pytest.approx(2e-9, rel=1e-6) and beta == pytest.approx(1.0, abs=1e-6) and n == 7
    assert ("assumed" in note) == ("lag_" not in text and "xaxis" not in text)


@pytest.mark.parametrize("text,why", [("lag,msd_a,msd_b\n0,0,0\n1,1,2\n2,2,4\n", "MSD columns"),
                                      ("0 0\n1 1\n", "three"), ("0 0\n1 x\n2 2\n", "not a number"),
                                      ("0 0 0\n1 1\n2 2 2\n", "columns")])
def test_ambiguous_or_malformed_tables_say_why(text, why):
    got = parse_curve_text(text, {"na"})
    assert isinstance(got, str) and why in got


def test_json_inline_and_nested_curves_and_citations(tmp_path):
    run = _run(tmp_path)
    (tmp_path / "analysis/W/msd.json").write_text(json.dumps({"NA": {"lag_ps": LAG.tolist(), "msd_nm2": MSD.tolist()},
                                                              "CL": {"lag_ps": LAG.tolist(), "msd_nm2": (2 * MSD).tolist()}}))
    c = read_recorded_curve(run, "W", _entry(msd_file="msd.json"), "NA")
    assert c is not None and c.msd_nm2 == pytest.approx(MSD) and c.location == "analysis/W/msd.json"
    inline = read_recorded_curve(run, "W", _entry(curves={"lag_ps": LAG.tolist(), "msd_nm2": MSD.tolist()}))
    assert inline is not None and inline.location.endswith("#/observables/self_diffusion/D_na/curves")
    # a "source" naming a tool or the trajectory is not an MSD citation
    assert curve_citation({"source": "gmx msd -mol"}) is None
    assert curve_citation({"source": {"path": "cases/W/prod/prod.xtc", "sha256": "0" * 64}}) is None
    assert curve_citation({"diagnostics": {"source": "analysis/W/msd.xvg"}}) == ("source", "analysis/W/msd.xvg")
    assert not run.fs.findings


def test_curves_compare_by_factor_and_by_time_dependence():
    rng = np.random.default_rng(7)
    lag = np.arange(0, 201) * 0.1
    msd = 0.012 * lag
    blocks = [msd * (1 + 0.02 * rng.standard_normal()) for _ in range(4)]
    canon = (lag, msd, blocks)
    same = compare_curves(lag, msd * 1.01, canon, (2.0, 10.0), 0.05)
    assert same is not None and not same.disagrees
    scaled = compare_curves(lag, msd * 3, canon, (2.0, 10.0), 0.05)
    assert scaled.disagrees and not scaled.shape_differs and scaled.ratio_median == pytest.approx(3)
    drift = compare_curves(lag, msd + 0.02 * lag ** 2, canon, (2.0, 10.0), 0.05)
    assert drift.disagrees and drift.shape_differs and drift.exponent_shift > 0
    wrapped = compare_curves(lag, 0.03 * (1 - np.exp(-msd / 0.03)), canon, (2.0, 10.0), 0.05)
    assert wrapped.disagrees and wrapped.shape_differs and wrapped.exponent_shift < 0


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400), st.sets(st.text(max_size=4), max_size=3))
def test_hostile_text_never_raises(text, want):
    got = parse_curve_text(text, want)
    if not isinstance(got, str):
        lag, msd, _ = got
        assert lag.shape == msd.shape and lag.size >= 3


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=3, max_size=40))
def test_hostile_numbers_never_raise(values):
    lag = np.arange(len(values)) * 0.5
    msd = np.asarray(values, dtype=np.float64)
    canon = (lag, np.abs(lag) * 0.01, [lag * 0.01 * f for f in (0.9, 1.0, 1.1, 1.0)])
    curve_diffusion(lag, msd, (0.5, 5.0))
    compare_curves(lag, msd, canon, (0.5, 5.0), 0.05)
