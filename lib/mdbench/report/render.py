"""Render audit notebooks to one self-contained HTML page (papermill, then nbconvert).

The page embeds its figures as base64 PNG (nbconvert's default for image outputs) and hides code cells.
All run-provided text reaches the page only through escaped tables (:mod:`mdbench.report.tables`) or
escaped plain-text outputs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from mdbench.errors import InputError, MdbenchError
from mdbench.execute import check_kernel
from mdbench.paths import NOTEBOOKS_DIR
from mdbench.record.atomic import atomic_write_text

log = logging.getLogger(__name__)

KERNEL = "mdbench"


class ReportError(MdbenchError):
    """The report notebook failed; ``notebook`` is the partially executed notebook (evidence)."""

    def __init__(self, message: str, notebook: str | None = None):
        self.notebook = notebook
        super().__init__(message + (f" (partial notebook: {notebook})" if notebook else ""))


_EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", re.I)
_TEMPLATE_SCRIPT = re.compile(r"<script type=\"(?:module|text/x-mathjax-config)\">.*?</script>", re.I | re.S)


def strip_external_scripts(page: str) -> str:
    """Remove the template's CDN scripts (MathJax, require.js, mermaid): the page must work offline."""
    return _TEMPLATE_SCRIPT.sub("", _EXTERNAL_SCRIPT.sub("", page))


def render_report(audit_dirs: list[str | Path], out_html: str | Path, *, notebook: str | None = None,
                  title: str = "SAEO audit report", timeout_s: int = 600,
                  keep_notebook: str | Path | None = None) -> Path:
    """Execute ``notebooks/aggregate.ipynb`` (several audits) or ``notebooks/audit_run.ipynb`` (one audit)
    and write one self-contained HTML page.

    Parameters
    ----------
    audit_dirs : list of path
        Audit directories, each holding ``saeo.json``.
    out_html : path
        The HTML file to write.
    notebook : {"aggregate", "audit_run"}, optional
        Which notebook; default ``aggregate`` (``audit_run`` requires exactly one audit directory).
    title : str
        Page title (escaped).
    timeout_s : int
        Per-cell execution timeout [s].
    keep_notebook : path, optional
        Where to keep the executed notebook; by default none is left beside the page.

    Returns
    -------
    Path
        ``out_html``.
    """
    check_kernel(KERNEL)  # before anything else: the one thing `make setup` fixes
    dirs = [str(Path(d).resolve()) for d in audit_dirs]
    if not dirs:
        raise InputError("no audit directory given")
    for d in dirs:
        if not (Path(d) / "saeo.json").is_file():
            raise InputError("not an audit directory (no saeo.json); run `mdbench audit` first", d)
    name = notebook or "aggregate"
    if name not in ("aggregate", "audit_run"):
        raise InputError(f"unknown report notebook {name!r}; use aggregate or audit_run")
    if name == "audit_run" and len(dirs) != 1:
        raise InputError("the per-run report (audit_run) takes exactly one audit directory")
    params = {"audit_dirs": dirs, "title": title} if name == "aggregate" else {"audit_dir": dirs[0], "title": title}
    params["base_dir"] = os.getcwd()  # where a relative run_dir of an audit is resolved (the notebook runs elsewhere)
    render_notebook(NOTEBOOKS_DIR / f"{name}.ipynb", params, out_html, timeout_s=timeout_s,
                    keep_notebook=keep_notebook if keep_notebook is not None else False)
    return Path(out_html)


def render_notebook(notebook: str | Path, parameters: dict, out_html: str | Path, *, timeout_s: int = 600,
                    keep_notebook: bool | str | Path = False) -> Path:
    """Execute ``notebook`` with papermill (``parameters``) and write it as one self-contained HTML page.

    The executed notebook is not kept unless asked (the default: only the page is written): at the path
    ``keep_notebook`` when it is a path, beside the page (``.ipynb``) when it is True (a failed one is always
    kept, as ``<page>.failed.ipynb``);
    code cells and scrapbook scraps are left out of the page, and so are the template's CDN scripts (the
    page works offline).

    Raises
    ------
    ReportError
        A cell failed (the partially executed notebook is named).
    """
    import papermill as pm  # noqa: PLC0415 - papermill and nbconvert take seconds to import; paid only to render
    from nbconvert import HTMLExporter  # noqa: PLC0415 - as papermill

    check_kernel(KERNEL)  # one line naming `make setup`, never papermill's NoSuchKernel traceback
    name = Path(notebook).stem
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    if keep_notebook is True:
        keep: Path | None = out_html.with_suffix(".ipynb")
    else:
        keep = Path(keep_notebook) if keep_notebook else None
    with tempfile.TemporaryDirectory() as tmp:
        executed = Path(tmp) / "executed" / f"{name}.ipynb"
        executed.parent.mkdir()
        try:
            pm.execute_notebook(str(notebook), str(executed), parameters=parameters,
                                kernel_name=KERNEL, progress_bar=False, cwd=tmp, execution_timeout=timeout_s,
                                log_output=False)
        except pm.PapermillExecutionError as exc:
            failed = out_html.with_suffix(".failed.ipynb")
            shutil.copyfile(executed, failed)
            raise ReportError(f"report notebook {name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}",
                              str(failed)) from exc
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(executed, keep)
        nb_text = executed.read_text(encoding="utf-8")
    import nbformat  # noqa: PLC0415 - as papermill (only to render)

    nb = nbformat.reads(nb_text, as_version=4)
    for cell in nb.cells:  # scrapbook scraps are data for machines, not page content
        if cell.get("cell_type") == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not any(
                k.startswith("application/scrapbook") for k in o.get("data", {}))]
    quiet = logging.getLogger("mdbench.report.nbconvert")
    quiet.setLevel(logging.ERROR)  # "Alternative text is missing": figures carry their titles and captions
    exporter = HTMLExporter(template_name="lab", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, log=quiet)
    body, _ = exporter.from_notebook_node(nb)
    atomic_write_text(out_html, strip_external_scripts(body))  # issue 25: a killed render leaves no partial page
    log.info("report written to %s", out_html)
    return out_html
