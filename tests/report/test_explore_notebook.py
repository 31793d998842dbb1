"""notebooks/explore_run.ipynb executed by papermill on the micro fixture (issue 38): stages, ledger, time
series, the curves the run's analysis recorded (issue 44: the g(r) and first minima of its results.json, its
own MSD and Green-Kubo figures), the independent recomputation (RDF with N(r), MSD, Green-Kubo) only when
asked and labelled as such, states and a 3-D first-shell view; nothing written into the run directory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
import _cli_fixtures  # noqa: E402

from mdbench.paths import NOTEBOOKS_DIR  # noqa: E402


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.mark.gromacs
def test_explore_run_notebook_executes_on_a_real_run(tmp_path_factory, tmp_path: Path) -> None:
    import papermill as pm
    import scrapbook as sb

    from mdbench.execute import check_kernel

    from mdbench.analysis.observables import RDF, SELF_DIFFUSION, VISCOSITY
    from mdbench.analysis.pipeline import AnalysisSettings, analyze_files

    check_kernel()
    shared = _cli_fixtures.micro_dirs(tmp_path_factory)["run"]
    run = tmp_path / "run"  # a copy whose analysis/W/ is the pipeline's own (the shared run is read-only)
    shutil.copytree(shared, run, symlinks=True)
    prod, guard_ps = run / "cases" / "W" / "prod", _cli_fixtures.rb.GUARD_PS
    shutil.rmtree(run / "analysis" / "W")
    doc = analyze_files(prod / "prod.tpr", prod / "prod.xtc", prod / "prod.edr", run / "analysis" / "W",
                        guard_ps=guard_ps, case="W", workers=1, settings=AnalysisSettings(guard_ps=guard_ps))
    before = _files(run)
    out = tmp_path / "explore.ipynb"
    pm.execute_notebook(str(NOTEBOOKS_DIR / "explore_run.ipynb"), str(out),
                        parameters={"run_dir": str(run), "recompute": True},
                        kernel_name="mdbench", cwd=str(tmp_path), progress_bar=False)
    scraps = sb.read_notebook(str(out)).scraps
    summary = scraps["summary"].data
    assert summary["cases"] == ["W"] and summary["n_attempts"] >= 2 and summary["charged_ns"] > 0
    # the g(r) shown are the recorded ones: every RDF channel of results.json with its registered first minimum
    recorded = {name.split("/", 1)[1]: ob["value"] for name, ob in doc["observables"].items() if RDF.owns(name)}
    assert recorded and scraps["recorded_rdf_first_min_nm"].data == json.loads(json.dumps(recorded))
    assert scraps["recorded_figures"].data == sorted({SELF_DIFFUSION.figure, VISCOSITY.figure} & set(doc["figures"]))
    assert scraps["rdf_points"].data == 100        # the recomputation, asked for
    assert scraps["shell_residues"].data >= 1      # the cation's first shell is not empty
    text = out.read_text()
    assert "application/vnd.plotly.v1+json" in text  # interactive figures
    assert "3Dmol" in text                           # the 3-D view
    assert _files(run) == before                     # nothing written into the run directory
    assert text.count("independent recomputation (not the judged result)") >= 3  # RDF, MSD, GK: labelled
