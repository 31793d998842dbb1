"""The agent input bundle: completeness, byte-identical rebuilds, tamper detection."""

import json

import pytest
from click.testing import CliRunner

from mdbench.inputs.bundle import build_bundle, frozen_forcefield_checksum, verify_bundle
from mdbench.inputs.commands import bundle
from mdbench.inputs.forcefield import forcefield_checksum


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_bundle("paper", tmp_path_factory.mktemp("b") / "agent_input")


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout(built):
    files = _files(built)
    for name in ["BENCHMARK_CONTRACT.md", "PUBLIC_LOGGING_CONTRACT.md", "PROMPT_TEMPLATE.md", "bundle_checksums.sha256",
                 "cases/DE.yaml", "cases/HCE.yaml", "cases/LHCE.yaml", "forcefield/manifest.json",
                 "forcefield/forcefield.itp", "forcefield/TTE.itp", "geometries/FSI.pdb", "references/ESTIMATORS.md"]:
        assert name in files
    assert any(n.startswith("schemas/") and n.endswith(".json") for n in files)
    assert b"schema version 1.2" in files["PUBLIC_LOGGING_CONTRACT.md"]
    assert b"| HCE | 1,470 | 1,470 | 2,940 | 0 | 49,980 |" in files["BENCHMARK_CONTRACT.md"]
    assert frozen_forcefield_checksum().encode() in files["BENCHMARK_CONTRACT.md"]
    assert b"bundle_checksums.sha256" in files["PROMPT_TEMPLATE.md"]
    json.loads(files["forcefield/manifest.json"])
    assert forcefield_checksum(built / "forcefield") == frozen_forcefield_checksum()


def test_rebuild_is_byte_identical(built, tmp_path):
    again = build_bundle("paper", tmp_path / "again")
    assert _files(again) == _files(built)
    assert verify_bundle(built) == []


def test_verify_catches_one_byte_change_missing_and_extra(built, tmp_path):
    copy = build_bundle("paper", tmp_path / "tampered")
    target = copy / "forcefield" / "DMC.itp"
    data = bytearray(target.read_bytes())
    data[200] = ord("9") if data[200] != ord("9") else ord("8")
    target.write_bytes(bytes(data))
    (copy / "geometries" / "LI.pdb").unlink()
    (copy / "notes.txt").write_text("x")
    assert verify_bundle(copy) == ["changed: forcefield/DMC.itp", "missing: geometries/LI.pdb", "extra: notes.txt"]
    result = CliRunner().invoke(bundle, ["verify", str(copy)])
    assert result.exit_code == 1
    assert "changed: forcefield/DMC.itp" in result.output
    assert CliRunner().invoke(bundle, ["verify", str(built)]).exit_code == 0


def test_build_refuses_non_empty_folder(built):
    from mdbench.errors import InputError

    with pytest.raises(InputError, match="not empty"):
        build_bundle("paper", built)
