"""The energy-file cache: one parse per file version, read-only arrays, a rewritten file is read again."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis import thermo


def test_same_file_is_parsed_once_and_shared_read_only(tmp_path, monkeypatch, water_nvt_run):
    src = tmp_path / "a.edr"
    shutil.copy(Path(water_nvt_run) / "md.edr", src)
    calls = []
    real = thermo._read_energy_file
    monkeypatch.setattr(thermo, "_read_energy_file", lambda p: calls.append(p) or real(p))
    link = tmp_path / "link.edr"
    link.symlink_to(src)
    a = thermo.read_energy_file(src)
    b = thermo.read_energy_file(link)  # the audit reads the run's file, its reanalysis a link to it
    assert len(calls) == 1 and b.path == str(link)
    np.testing.assert_array_equal(a.time_ps, b.time_ps)
    with pytest.raises(ValueError):
        a.time_ps[0] = 1.0
    a.terms["mine"] = np.zeros(1)
    assert "mine" not in b.terms and "mine" not in thermo.read_energy_file(src).terms


def test_a_rewritten_file_is_read_again(tmp_path, monkeypatch, water_nvt_run):
    src = tmp_path / "a.edr"
    shutil.copy(Path(water_nvt_run) / "md.edr", src)
    first = thermo.read_energy_file(src)
    data = src.read_bytes()
    src.unlink()
    src.write_bytes(data)  # a new inode: another version of the file
    calls = []
    real = thermo._read_energy_file
    monkeypatch.setattr(thermo, "_read_energy_file", lambda p: calls.append(p) or real(p))
    again = thermo.read_energy_file(src)
    assert len(calls) == 1
    np.testing.assert_array_equal(first.time_ps, again.time_ps)
