"""HTML leaderboard report: execute ``notebooks/sdl_leaderboard.ipynb`` with papermill, convert with nbconvert."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from mdbench.errors import MdbenchError
from mdbench.paths import NOTEBOOKS_DIR

log = logging.getLogger(__name__)

LEADERBOARD_NOTEBOOK = NOTEBOOKS_DIR / "sdl_leaderboard.ipynb"


class ReportError(MdbenchError):
    """The leaderboard notebook failed; the partially executed notebook is kept beside the HTML path."""


def render_leaderboard_html(results_dir: str | Path, html_out: str | Path, *, target_ratio: float = 1.05,
                            kernel_name: str = "mdbench", timeout_s: int = 600,
                            assignments_dirs: tuple | list = (), compile_sha256: tuple | list = ()) -> Path:
    """Execute the leaderboard notebook on ``results_dir`` and write it as HTML for people: figures, tables and
    prose only — no code cell, no input prompt (nbconvert ``exclude_input``).

    The kernel is checked first (:func:`mdbench.execute.stage.check_kernel`: a missing one is one line saying
    to run ``make setup``). The executed notebook is written next to the HTML (``<name>.ipynb``) first, so a
    failure leaves the evidence on disk. ``assignments_dirs`` / ``compile_sha256`` name the compile(s) the
    results were run against (:func:`mdbench.sdl.leaderboard.score_results`).
    """
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    from mdbench.execute.stage import check_kernel

    check_kernel(kernel_name)
    html_out = Path(html_out).resolve()
    html_out.parent.mkdir(parents=True, exist_ok=True)
    executed = html_out.with_suffix(".ipynb")
    try:
        pm.execute_notebook(str(LEADERBOARD_NOTEBOOK), str(executed), kernel_name=kernel_name,
                            parameters={"results_dir": str(Path(results_dir).resolve()),
                                        "assignments_dir": os.pathsep.join(
                                            str(Path(a).resolve()) for a in assignments_dirs),
                                        "compile_sha256": ",".join(compile_sha256), "target_ratio": target_ratio},
                            progress_bar=False, execution_timeout=timeout_s, cwd=str(html_out.parent))
    except Exception as exc:  # papermill raises PapermillExecutionError and friends
        raise ReportError(f"leaderboard notebook failed ({exc.__class__.__name__}); partial notebook: {executed}") \
            from exc
    nb = nbformat.read(str(executed), as_version=4)
    with warnings.catch_warnings():
        # scrapbook's glue outputs have no HTML representation; nbconvert warns once per scrap
        warnings.filterwarnings("ignore", message=".*scrapbook.scrap.json.*")
        body, _ = HTMLExporter(exclude_input=True, exclude_input_prompt=True,
                               exclude_output_prompt=True).from_notebook_node(nb)
    html_out.write_text(body, encoding="utf-8")
    return html_out
