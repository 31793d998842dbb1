"""The numpy energy-file reader against pyedr, its reference: bit-identical on every layout GROMACS writes here,
the same result or error on torn, garbage and unfamiliar files (those it leaves to pyedr)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis import edrfile, thermo

pytestmark = pytest.mark.gromacs


def _bits(a) -> np.ndarray:
    """float64 values as their bit patterns: equality is bit-identity (and NaN equals the same NaN)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _before(path: Path) -> thermo.EnergySeries:
    """``read_energy_file``'s parse before the numpy reader: the header check, then pyedr."""
    thermo._check_edr_header(path)
    return thermo._read_energy_file_pyedr(path)


def _outcome(read, path: Path) -> tuple:
    """A reader's result as comparable data: the error (class, message) or (time, terms, units) bit for bit."""
    try:
        s = read(path)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return "error", type(exc).__name__, str(exc)
    return ("series", _bits(s.time_ps).tobytes(), [(k, _bits(v).tobytes()) for k, v in s.terms.items()],
            list(s.units.items()))


def _layouts(path: Path) -> list[edrfile._Layout]:
    """The frame layouts of a file, one per run of frames that share one."""
    buf = path.read_bytes()
    names, _, offset = edrfile._file_header(buf)
    return [layout for _, layout, _ in edrfile._frame_runs(buf, offset, len(names))]


def _carries_subblocks(layout: edrfile._Layout) -> bool:
    energies = layout.n_terms * layout.real_bytes * (3 if layout.with_sums else 1)
    return layout.frame_bytes > layout.header_bytes + energies


def assert_exactly_pyedr(path: Path) -> edrfile.EnergyTable:
    """The numpy reader reads ``path`` itself (no fallback) and gives pyedr's frames, names, units, values."""
    import pyedr

    table = edrfile.read_edr(path)
    energies, names, _ = pyedr.read_edr(str(path))
    units = pyedr.get_unit_dictionary(str(path))
    reference = np.array(energies, dtype=np.float64).reshape(len(energies), len(names))
    assert ["Time", *table.names] == names
    assert list(units) == names and [units[k] for k in table.names] == table.units
    np.testing.assert_array_equal(_bits(table.time_ps), _bits(reference[:, 0]))
    np.testing.assert_array_equal(_bits(table.columns.T), _bits(reference[:, 1:]))
    assert _outcome(thermo._read_energy_file, path) == _outcome(_before, path)  # and so read_energy_file
    return table


@pytest.mark.parametrize("stage", ["em", "nvt", "npt", "prod"])
def test_project_energy_files_read_exactly_as_pyedr(micro_de_energy_files, stage):
    table = assert_exactly_pyedr(micro_de_energy_files[stage])
    assert table.time_ps.size > 10 and "Potential" in table.names
    if stage == "npt":
        assert {"Volume", "Density", "Pres-XY"} <= set(table.names)


@pytest.mark.parametrize("kind", ["sums_and_blocks", "histograms", "double"])
def test_sums_blocks_and_double_precision_read_exactly_as_pyedr(water_energy_files, kind):
    if kind not in water_energy_files:
        pytest.skip("gmx_d (double-precision GROMACS) not installed")
    path = water_energy_files[kind]
    table = assert_exactly_pyedr(path)
    assert table.time_ps.size == 11
    layouts = _layouts(path)
    # what the file is meant to exercise is in it: nsum = 0 then nsum > 0 frames, free-energy subblocks
    assert not layouts[0].with_sums and any(layout.with_sums for layout in layouts)
    assert all(_carries_subblocks(layout) for layout in layouts)
    assert {layout.real_bytes for layout in layouts} == {8 if kind == "double" else 4}
    if kind == "histograms":  # int64 histogram subblocks whose length changes: frame sizes vary
        assert len({layout.frame_bytes for layout in layouts}) >= 3


def test_torn_copies_read_as_before(water_energy_files, micro_de_energy_files, tmp_path):
    """A file cut anywhere: pyedr returns the frames before the cut (or its error inside the file header), and
    so does the numpy reader itself, without falling back, wherever the cut lies after the term names."""
    cut = tmp_path / "cut.edr"
    small, large = water_energy_files["sums_and_blocks"], micro_de_energy_files["prod"]
    last_frame = len(small.read_bytes()) - _layouts(small)[-1].frame_bytes
    size = len(large.read_bytes())
    cuts = {small: sorted({*range(0, last_frame, 11), *range(last_frame - 8, last_frame + 1000)}),  # every byte
            large: [*range(0, size, 50_021), size - 231, size - 100, size - 5, size - 1]}  # pyedr: 50 ms a read
    for source, points in cuts.items():
        data = source.read_bytes()
        names_end = edrfile._file_header(data)[2]
        for n in points:
            cut.write_bytes(data[:n])
            assert _outcome(thermo._read_energy_file, cut) == _outcome(_before, cut), n
            if n >= names_end:
                edrfile.read_edr(cut)  # torn frames are the numpy reader's own case, not pyedr's


def test_garbage_behaves_as_before(water_energy_files, tmp_path):
    """Random bytes, alone or after a valid file header, and corrupt frames: the same InputError as before."""
    source = water_energy_files["sums_and_blocks"]
    data = source.read_bytes()
    names_end = edrfile._file_header(data)[2]
    rng = np.random.default_rng(18)
    bad = tmp_path / "bad.edr"
    bad.write_bytes(rng.bytes(5000))
    with pytest.raises(thermo.InputError, match="not a GROMACS energy file"):
        thermo.read_energy_file(bad)
    for i in range(20):
        bad.write_bytes(data[:names_end] + rng.bytes(int(rng.integers(1, 3000))))
        assert _outcome(thermo._read_energy_file, bad) == _outcome(_before, bad), i
    corrupt = bytearray(data)
    corrupt[names_end + 4:names_end + 8] = struct.pack(">i", 12345)  # the first frame's magic
    bad.write_bytes(bytes(corrupt))
    with pytest.raises(thermo.InputError, match=r"cannot read energy file \(RuntimeError"):
        thermo._read_energy_file(bad)
    assert _outcome(thermo._read_energy_file, bad) == _outcome(_before, bad)


def _patched(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack(">i", value) + data[offset + 4:]


@pytest.mark.filterwarnings("ignore:Note. enx file_version 4")  # pyedr's note on the version-4 variant
def test_unfamiliar_layouts_are_left_to_pyedr(water_energy_files, tmp_path):
    """Old versions, char subblocks, a frame whose term count is not the file's: pyedr decides, as before."""
    data = water_energy_files["sums_and_blocks"].read_bytes()
    names_end = edrfile._file_header(data)[2]
    first = _layouts(water_energy_files["sums_and_blocks"])[0]
    last_frame = len(data) - _layouts(water_energy_files["sums_and_blocks"])[-1].frame_bytes
    rs = first.real_bytes
    first_subblock_type = names_end + rs + 56 + 8  # after nre/reserved/nblock: block id, nsub, then (type, nr)
    assert struct.unpack_from(">ii", data, first_subblock_type) == (2, 6)  # the free-energy block's doubles
    variants = {
        "file version 4": _patched(data, 4, 4),
        "char subblock": _patched(data, first_subblock_type + 8, 4),  # its int subblock declared char: same bytes
        "term count": _patched(data, last_frame + rs + 44, first.n_terms - 1),  # pyedr: ragged rows
    }
    path = tmp_path / "odd.edr"
    for what, variant in variants.items():
        path.write_bytes(variant)
        with pytest.raises(edrfile.Unsupported):
            edrfile.read_edr(path)
        assert _outcome(thermo._read_energy_file, path) == _outcome(_before, path), what
    # a version-4 frame header (no dt) in a version-5 file: declined too (not compared: pyedr, reading this one's
    # bytes with the old layout, takes a data value for a subblock count and allocates without bound)
    path.write_bytes(_patched(data, names_end + rs + 4, 4))
    with pytest.raises(edrfile.Unsupported, match="frame version"):
        edrfile.read_edr(path)


def test_huge_counts_are_an_error_not_an_allocation(water_energy_files, tmp_path):
    """pyedr allocates per block/subblock/term count before reading them: a corrupt count of 2^30 would exhaust
    memory there, so it is an InputError here and pyedr is not asked."""
    data = water_energy_files["sums_and_blocks"].read_bytes()
    names_end = edrfile._file_header(data)[2]
    rs = _layouts(water_energy_files["sums_and_blocks"])[0].real_bytes
    path = tmp_path / "huge.edr"
    for what, offset in (("blocks", rs + 52), ("subblocks", rs + 60), ("energy terms", rs + 44)):
        path.write_bytes(_patched(data, names_end + offset, 1 << 30))
        with pytest.raises(thermo.InputError, match=f"cannot read energy file .*{what} cannot fit"):
            thermo._read_energy_file(path)


def test_fallback_gives_the_same_series(micro_de_energy_files, monkeypatch):
    path = micro_de_energy_files["npt"]
    fast = _outcome(thermo._read_energy_file, path)
    calls = []
    real = thermo._read_energy_file_pyedr
    monkeypatch.setattr(thermo, "_read_energy_file_pyedr", lambda p: calls.append(p) or real(p))

    def decline(p):
        raise edrfile.Unsupported("declined by the test")

    monkeypatch.setattr(edrfile, "read_edr", decline)
    assert _outcome(thermo._read_energy_file, path) == fast and calls == [path]


def test_engine_readers_keep_pyedr_shapes(micro_de_energy_files, tmp_path):
    import pyedr

    from mdbench.engine.gates import read_edr
    from mdbench.engine.segments import edr_last_step

    path = micro_de_energy_files["npt"]
    ours, theirs = read_edr(path), pyedr.edr_to_dict(str(path))
    assert list(ours) == list(theirs)
    for k, v in theirs.items():
        np.testing.assert_array_equal(_bits(ours[k]), _bits(v))
        assert ours[k].flags.writeable  # callers own their arrays, as with pyedr
    data = path.read_bytes()
    torn = tmp_path / "torn.edr"
    torn.write_bytes(data[:len(data) - 10])
    t_last = pyedr.edr_to_dict(str(torn))["Time"][-1]
    assert edr_last_step(torn, dt_ps=0.002) == round(t_last / 0.002)
