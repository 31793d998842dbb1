"""The setup template runs end to end on a micro box and records the setup stage."""

import json
import shutil

import nbformat
import pytest

from mdbench.paths import TEMPLATES_DIR

TEMPLATE = TEMPLATES_DIR / "study" / "10_setup.ipynb"


def test_template_is_thin_and_clean():
    nb = nbformat.read(TEMPLATE, as_version=4)
    assert nb.metadata["kernelspec"] == {"name": "mdbench", "display_name": "Python (mdbench)", "language": "python"}
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    for name in ("run_dir: str", "system: str", "preset: str", "seed: int"):
        assert name in code[0].source
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    src = "\n".join(c.source for c in code)
    assert "def " not in src and "class " not in src
    assert len(src.splitlines()) < 150


@pytest.mark.gromacs
@pytest.mark.skipif(shutil.which("gmx") is None or shutil.which("packmol") is None, reason="needs gmx and packmol")
def test_setup_template_builds_and_records(tmp_path):
    from mdbench.execute import run_stage

    from _testseed import seed_for

    res = run_stage(tmp_path, "LHCE", "study/10_setup", {"preset": "micro", "seed": seed_for("build/setup/packmol")})
    assert res.status == "finished", res.error
    assert res.scraps["stage_state"] == "valid"
    assert res.scraps["n_atoms"] == 1040
    assert all(a["passed"] for a in res.scraps["audits"].values())
    assert (tmp_path / "cases" / "LHCE" / "setup" / "LHCE.gro").is_file()
    states = json.loads((tmp_path / "run_record" / "stage_states.json").read_text())
    assert states["LHCE"]["setup"]["state"] == "valid"
    artifacts = json.loads((tmp_path / "run_record" / "artifacts.json").read_text())
    assert any("cases/LHCE/setup/LHCE.gro" in str(k) for k in (artifacts.get("files", artifacts)))
