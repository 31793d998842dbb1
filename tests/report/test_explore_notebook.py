"""notebooks/explore_run.ipynb executed by papermill on the micro fixture (issue 38): stages, ledger, time
series, RDF with N(r), MSD, Green-Kubo integral, states and a 3-D first-shell view; nothing written into
the run directory."""

from __future__ import annotations

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

    check_kernel()
    run = _cli_fixtures.micro_dirs(tmp_path_factory)["run"]
    before = _files(run)
    out = tmp_path / "explore.ipynb"
    pm.execute_notebook(str(NOTEBOOKS_DIR / "explore_run.ipynb"), str(out), parameters={"run_dir": str(run)},
                        kernel_name="mdbench", cwd=str(tmp_path), progress_bar=False)
    scraps = sb.read_notebook(str(out)).scraps
    summary = scraps["summary"].data
    assert summary["cases"] == ["W"] and summary["n_attempts"] >= 2 and summary["charged_ns"] > 0
    assert scraps["rdf_points"].data == 100
    assert scraps["shell_residues"].data >= 1      # the cation's first shell is not empty
    text = out.read_text()
    assert "application/vnd.plotly.v1+json" in text  # interactive figures
    assert "3Dmol" in text                           # the 3-D view
    assert _files(run) == before                     # nothing written into the run directory
