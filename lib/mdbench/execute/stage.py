"""Execute one template for one system with papermill, capture its scraps, and record what happened.

``run_stage`` is the unit of work of the whole pipeline: it validates parameters before any kernel starts,
skips a stage whose inputs have not changed since it last finished, runs the notebook with the
``mdbench`` kernel into ``RUN_DIR/notebooks/<system>/<stage>.ipynb``, writes the glued scraps to
``<stage>.scraps.json`` next to it, and appends ``stage_started`` / ``stage_finished`` / ``stage_failed``
events. A failing cell never raises out of ``run_stage``: the executed notebook with its traceback is kept
as evidence and the result says ``failed``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mdbench.errors import InputError, MdbenchError
from mdbench.execute.parameters import read_schema, validate_parameters
from mdbench.paths import TEMPLATES_DIR
from mdbench.record.atomic import atomic_write_text
from mdbench.record.store import RunRecord, json_safe, sha256_file

log = logging.getLogger(__name__)

KERNEL_NAME = "mdbench"


class KernelMissing(MdbenchError):
    """The Jupyter kernel papermill needs is not registered."""


@dataclass
class StageResult:
    """Outcome of one (run, system, stage) job."""

    run_dir: str
    system: str
    stage: str
    status: str  # finished | failed | skipped | not_reached
    notebook_path: str | None = None
    scraps: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    input_hash: str | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def template_path(stage: str) -> Path:
    """``templates/<group>/<name>.ipynb`` for a stage named ``<group>/<name>``."""
    path = TEMPLATES_DIR / f"{stage}.ipynb"
    if "/" not in stage or not path.is_file():
        available = sorted(str(p.relative_to(TEMPLATES_DIR).with_suffix("")) for p in TEMPLATES_DIR.rglob("*.ipynb"))
        raise InputError(f"no template for stage {stage!r}; available: {', '.join(available) or 'none'}",
                         str(path))
    return path


def stage_outputs(run_dir: str | Path, system: str, stage: str) -> tuple[Path, Path]:
    """(executed notebook, scraps.json) paths of a stage in a run directory."""
    name = stage.rsplit("/", 1)[-1]
    folder = Path(run_dir) / "notebooks" / system
    return folder / f"{name}.ipynb", folder / f"{name}.scraps.json"


def check_kernel(kernel_name: str = KERNEL_NAME) -> None:
    """Raise :class:`KernelMissing` with the fix if the kernel is not registered.

    Every command that executes a notebook calls this first (``run_stage``, ``mdbench report``,
    ``mdbench arena aggregate``, ``mdbench sdl leaderboard --html``), so a missing kernel is one line
    naming ``make setup``, never papermill's ``NoSuchKernel`` traceback.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel as exc:
        raise KernelMissing(f"Jupyter kernel {kernel_name!r} is not registered: run `make setup` "
                            "(it registers the project's virtualenv as that kernel)") from exc


def _stage_order(stage: str) -> str:
    return stage.rsplit("/", 1)[-1]


def _interrupted_start(rec: RunRecord, system: str, stage: str) -> dict | None:
    """The ``stage_started`` event of this stage that no ``stage_finished``/``stage_failed`` closed, if the
    latest execution of the stage is such an open one (its process was killed)."""
    latest = None
    for event in rec.events():
        payload = event.get("payload", {})
        if payload.get("system") != system or payload.get("stage") != stage:
            continue
        if event.get("type") == "stage_started":
            latest = event
        elif event.get("type") in ("stage_finished", "stage_failed"):
            latest = None
    return latest


def _set_aside_previous(rec: RunRecord, system: str, stage: str, notebook: Path, scraps_path: Path) -> None:
    """Before a stage runs again, record an interrupted execution and move its earlier outputs aside.

    An execution whose ``stage_started`` event was never closed (the kernel or driver was killed) gets a
    ``stage_interrupted`` event. The earlier executed notebook and scraps — a partial notebook, a failed
    one kept as evidence, or a finished one being superseded — move to
    ``notebooks/<system>/discarded/<name>_NN/`` with their inventory entries, so no listed file is overwritten.
    """
    open_start = _interrupted_start(rec, system, stage)
    if open_start is not None:
        rec.append_event("stage_interrupted", {
            "system": system, "stage": stage, "started_event": open_start["id"],
            "notebook": open_start.get("payload", {}).get("notebook"),
            "reason": f"execution started by event {open_start['id']} never finished or failed: its process "
                      "was stopped (killed, or the machine went down); the stage runs again"})
    previous = [p for p in (notebook, scraps_path) if p.is_file()]
    if previous:
        name = _stage_order(stage)
        discarded = notebook.parent / "discarded"
        n = 1 + sum(1 for p in discarded.glob(f"{name}_*")) if discarded.is_dir() else 1
        why = ("interrupted execution" if open_start is not None else "earlier execution superseded by a rerun")
        rec.set_aside(previous, discarded / f"{name}_{n:02d}", why, system=system, stage=stage)


def _latest_outcomes(rec: RunRecord, system: str) -> dict[str, dict]:
    """Latest stage_finished/stage_failed event payload per stage of one system."""
    latest: dict[str, dict] = {}
    for event in rec.events():
        if event.get("type") in ("stage_finished", "stage_failed"):
            payload = event.get("payload", {})
            if payload.get("system") == system:
                latest[payload.get("stage")] = dict(payload, outcome=event["type"])
    return latest


def input_hash(template: Path, params: dict[str, Any], upstream: dict[str, str]) -> str:
    """sha256 over the template's bytes, the canonical parameters and the upstream stages' output hashes.

    ``run_dir`` is left out: it names the run, it is not an input, so a moved run directory resumes.
    """
    digest = hashlib.sha256()
    digest.update(sha256_file(template).encode())
    digest.update(json.dumps(json_safe({k: v for k, v in params.items() if k != "run_dir"}),
                             sort_keys=True).encode())
    digest.update(json.dumps(upstream, sort_keys=True).encode())
    return digest.hexdigest()


def _scraps_of(notebook: Path) -> dict[str, Any]:
    """Scraps glued in an executed notebook, as JSON-safe data."""
    import scrapbook as sb

    scraps: dict[str, Any] = {}
    for name, scrap in sb.read_notebook(str(notebook)).scraps.items():
        data = scrap.data
        if hasattr(data, "to_dict") and callable(data.to_dict):  # pandas objects
            try:
                data = data.to_dict(orient="records")
            except TypeError:
                data = data.to_dict()
        try:
            scraps[name] = json.loads(json.dumps(json_safe(data), allow_nan=False))
        except (TypeError, ValueError):
            scraps[name] = repr(data)
    return scraps


def prepare_parameters(stage: str, run_dir: str | Path, system: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Inject ``run_dir``/``system`` when the template declares them, then validate."""
    template = template_path(stage)
    schema = read_schema(template)
    merged = dict(params or {})
    if "run_dir" in schema and "run_dir" not in merged:
        merged["run_dir"] = str(Path(run_dir).resolve())
    if "system" in schema and "system" not in merged:
        merged["system"] = system
    return validate_parameters(template, merged)


def run_stage(run_dir: str | Path, system: str, stage: str, params: dict[str, Any] | None = None, *,
              force: bool = False, kernel_name: str = KERNEL_NAME) -> StageResult:
    """Execute ``templates/<stage>.ipynb`` for one system into the run directory.

    Parameters
    ----------
    run_dir
        Run directory (created if missing).
    system
        Case name, e.g. ``"DE"``; also the folder of the executed notebook.
    stage
        ``"<group>/<name>"``, e.g. ``"study/20_minimize"``.
    params
        Template parameters; validated against the template's parameters cell before any kernel starts.
    force
        Rerun even if a finished execution with the same input hash exists.

    Returns
    -------
    StageResult
        ``finished``, ``failed`` (executed notebook kept with the traceback) or ``skipped``.
    """
    run_dir = Path(run_dir).resolve()
    template = template_path(stage)
    merged = prepare_parameters(stage, run_dir, system, params)
    rec = RunRecord(run_dir)
    notebook, scraps_path = stage_outputs(run_dir, system, stage)

    order = _stage_order(stage)
    outcomes = _latest_outcomes(rec, system)
    upstream = {name: o.get("scraps_sha256", "") for name, o in outcomes.items()
                if _stage_order(name) < order and o.get("outcome") == "stage_finished"}
    digest = input_hash(template, merged, upstream)

    previous = outcomes.get(stage)
    if (not force and previous and previous.get("outcome") == "stage_finished"
            and previous.get("input_hash") == digest and notebook.is_file() and scraps_path.is_file()
            and sha256_file(notebook) == previous.get("notebook_sha256")):
        log.info("skip %s %s: finished with the same inputs", system, stage)
        scraps = json.loads(scraps_path.read_text(encoding="utf-8"))
        return StageResult(str(run_dir), system, stage, "skipped", str(notebook), scraps, None, digest)

    check_kernel(kernel_name)
    notebook.parent.mkdir(parents=True, exist_ok=True)
    _set_aside_previous(rec, system, stage, notebook, scraps_path)
    rel_nb = str(notebook.relative_to(run_dir))
    rec.append_event("stage_started", {"system": system, "stage": stage, "notebook": rel_nb,
                                       "input_hash": digest, "parameters": merged, "template": str(template.name),
                                       "template_sha256": sha256_file(template)})
    started = time.monotonic()
    error = _execute(template, notebook, merged, kernel_name, run_dir)
    duration = time.monotonic() - started

    payload: dict[str, Any] = {"system": system, "stage": stage, "notebook": rel_nb, "input_hash": digest,
                               "duration_s": round(duration, 3)}
    if notebook.is_file():
        payload["notebook_sha256"] = sha256_file(notebook)
    if error is not None:
        rec.append_event("stage_failed", dict(payload, error=error))
        if notebook.is_file():
            rec.add_artifact(notebook)
        log.warning("%s %s failed: %s (see %s)", system, stage, error, notebook)
        return StageResult(str(run_dir), system, stage, "failed", str(notebook), {}, error, digest, duration)

    scraps = _scraps_of(notebook)
    atomic_write_text(scraps_path, json.dumps(scraps, indent=2, sort_keys=True) + "\n")
    rec.add_artifact(notebook)
    rec.add_artifact(scraps_path)
    rec.append_event("stage_finished", dict(payload, scraps=str(scraps_path.relative_to(run_dir)),
                                            scraps_sha256=sha256_file(scraps_path)))
    return StageResult(str(run_dir), system, stage, "finished", str(notebook), scraps, None, digest, duration)


def _execute(template: Path, notebook: Path, parameters: dict[str, Any], kernel_name: str,
             run_dir: Path) -> str | None:
    """Execute ``template`` into ``notebook`` with papermill (cwd ``run_dir``); the error (one line) or None."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    try:
        pm.execute_notebook(str(template), str(notebook), parameters=parameters, kernel_name=kernel_name,
                            cwd=str(run_dir), progress_bar=False, log_output=False,
                            request_save_on_cell_execute=True)
    except PapermillExecutionError as exc:
        return f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
    except Exception as exc:  # kernel died, notebook unreadable, …: still a failed stage, never a crash
        return f"{type(exc).__name__}: {exc}"
    return None
