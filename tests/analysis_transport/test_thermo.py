"""Thermodynamic series: synthetic truth (mean, g, drift) and a real GROMACS energy file vs gmx energy."""

from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import pytest

from mdbench.analysis.states import classify_result
from mdbench.analysis.thermo import (common_guard_ps, detect_equilibration, linear_drift, read_energy_file,
                                     thermo_analysis, thermo_observable)
from mdbench.errors import InputError

from .conftest import ou_series


def test_stationary_series_is_C_and_drift_is_SI(rng):
    t = np.arange(20000) * 0.1
    x = 1000.0 + ou_series(rng, t.size, 5.0, 2.0, 0.1)
    ob = thermo_observable(x.astype(np.float32), t, name="density", unit="kg/m^3", guard_ps=50.0)
    assert ob.mean == pytest.approx(1000.0, abs=1.0)
    assert ob.std == pytest.approx(5.0, rel=0.1)
    a = math.exp(-0.1 / 2.0)
    assert ob.statistical_inefficiency == pytest.approx((1 + a) / (1 - a), rel=0.2)
    assert classify_result(ob).state == "C"
    import json

    json.dumps(ob.to_dict(), allow_nan=False)
    ramp = x + 0.01 * t  # 20 kg/m^3 drift over the run
    ob2 = thermo_observable(ramp, t, name="density", unit="kg/m^3")
    assert ob2.drift.slope_per_ns == pytest.approx(10.0, rel=0.1)
    st = classify_result(ob2)
    assert st.state == "SI" and "no_significant_drift" in st.reason
    x[7] = np.nan
    assert classify_result(thermo_observable(x, t, name="density", unit="kg/m^3")).state == "F"


def test_linear_drift_exact():
    t = np.linspace(0, 100, 11)
    d = linear_drift(t, 3.0 + 0.5 * t)
    assert d.slope_per_ps == pytest.approx(0.5) and d.total_change == pytest.approx(50.0)
    assert d.stderr_per_ps == pytest.approx(0.0, abs=1e-12)


def test_detect_equilibration_finds_relaxation(rng):
    t = np.arange(5000) * 1.0
    x = 50.0 * np.exp(-t / 100.0) + ou_series(rng, t.size, 1.0, 1.0, 1.0)
    eq = detect_equilibration(x, t, max_points=500)
    assert 200.0 < eq.t0_ps < 1500.0 and eq.nskip == 10
    assert common_guard_ps([eq, detect_equilibration(x[::-1].copy(), t)]) >= eq.t0_ps


@pytest.mark.gromacs
def test_real_energy_file_against_gmx_energy(water_nvt_run):
    edr = water_nvt_run / "md.edr"
    es = read_energy_file(edr)
    assert es.time_ps.size == 101 and es.units["Temperature"] == "K"
    assert set(es.pressure_tensor_bar()) >= {"Pres-XX", "Pres-XY", "Pres-ZZ"}
    import pyedr

    columns = pyedr.edr_to_dict(str(edr))  # pyedr's own column-by-column reading: the same numbers
    np.testing.assert_array_equal(es.time_ps, columns.pop("Time"))
    assert es.terms.keys() == columns.keys()
    for term, values in columns.items():
        np.testing.assert_array_equal(es.terms[term], values)
    res = thermo_analysis(es, ensemble="NVT")
    assert "volume" in res.missing and "density" in res.missing  # fixed box: GROMACS writes neither
    assert set(res.observables) == {"temperature", "pressure", "potential_energy", "total_energy"}
    p = subprocess.run(["gmx", "-quiet", "energy", "-f", str(edr), "-o", str(water_nvt_run / "e.xvg")],
                       input="Temperature\nPotential\n\n", capture_output=True, text=True, timeout=60)
    rows = {m.group(1): (float(m.group(2)), float(m.group(5)))
            for m in re.finditer(r"^(\w+)\s+(-?[\d.e+-]+)\s+(\S+)\s+(\S+)\s+(-?[\d.e+-]+)", p.stdout, re.M)}
    for name, term in (("temperature", "Temperature"), ("potential_energy", "Potential")):
        whole = thermo_observable(es.terms[term], es.time_ps, name=name, unit="", n_blocks=1)  # all 101 frames
        avg, drift = rows[term]
        assert whole.mean == pytest.approx(avg, abs=2e-3 * abs(avg))  # gmx prints ~6 significant digits
        # gmx fits its drift to the exact averages over every MD step stored in the edr, we fit the 101 written
        # frames: agreement within 3 standard errors of our fitted total change (plus gmx's print precision)
        span_ps = float(es.time_ps[-1] - es.time_ps[0])
        tolerance = 3.0 * whole.drift.stderr_per_ps * span_ps + 1e-3
        assert whole.drift.total_change == pytest.approx(drift, abs=tolerance)


def test_missing_energy_file_names_the_file(tmp_path):
    with pytest.raises(InputError, match="nope.edr"):
        read_energy_file(tmp_path / "nope.edr")
    bad = tmp_path / "bad.edr"
    bad.write_bytes(b"not an energy file")
    with pytest.raises(InputError, match="bad.edr"):
        read_energy_file(bad)
