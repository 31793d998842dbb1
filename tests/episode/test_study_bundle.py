"""``mdbench study run --bundle DIR``: the pipeline reads its cases from a verified bundle (the oracle's input).

The successful path — a whole study built from ``agent_input/`` — is the oracle episode (test_oracle.py,
whose setup records name the bundle); here: what is read, and the refusals, before anything runs.
"""

from __future__ import annotations

import os

import pytest

from mdbench.errors import InputError
from mdbench.inputs.bundle import build_bundle, load_bundle_inputs
from mdbench.inputs.cases import load_preset

from _episode_helpers import mdbench


def test_bundle_inputs_are_the_presets_counts_and_target_state(tmp_path):
    bundle = build_bundle("micro", tmp_path / "b")
    inputs = load_bundle_inputs(bundle)
    preset = load_preset("micro")
    assert inputs.preset == "micro" and inputs.counts == preset.counts and inputs.atoms == preset.atoms
    assert set(inputs.temperature_K.values()) == {298.15} and set(inputs.pressure_bar.values()) == {1.0}
    assert (inputs.forcefield_dir / "LI.itp").is_file() and (inputs.geometry_dir / "TTE.pdb").is_file()


def test_a_changed_bundle_is_refused_before_anything_runs(tmp_path):
    bundle = build_bundle("micro", tmp_path / "b")
    case = bundle / "cases" / "HCE.yaml"
    case.write_text(case.read_text().replace("count: 30", "count: 31"))
    with pytest.raises(InputError, match="bundle verification failed.*changed: cases/HCE.yaml"):
        load_bundle_inputs(bundle)
    res = mdbench("study", "run", "--bundle", str(bundle), "--out", str(tmp_path / "run"), "--quiet")
    assert res.returncode == 1 and "bundle verification failed" in res.stderr
    assert "bundle_checksums.sha256" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_bundle_for_another_state_point_is_refused(tmp_path):
    bundle = build_bundle("micro", tmp_path / "b")
    files = {}
    for name in ("DE", "HCE", "LHCE"):
        p = bundle / "cases" / f"{name}.yaml"
        p.write_text(p.read_text().replace("temperature_K: 298.15", "temperature_K: 350.0"))
    # re-sign the bundle so that only the state point is wrong
    from mdbench.inputs.bundle import CHECKSUMS, checksum_text

    for p in sorted(bundle.rglob("*")):
        if p.is_file() and p.name != CHECKSUMS:
            files[p.relative_to(bundle).as_posix()] = p.read_bytes()
    os.chmod(bundle / CHECKSUMS, 0o644)
    (bundle / CHECKSUMS).write_text(checksum_text(files))
    res = mdbench("study", "run", "--bundle", str(bundle), "--out", str(tmp_path / "run"), "--quiet")
    assert res.returncode == 1 and "298.15 K and 1 bar" in res.stderr and "350.0" in res.stderr
