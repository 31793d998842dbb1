"""Task inputs produced by this project's own pipeline: one master copy, exact copies in the tasks.

``templates/arena/inputs/micro_lhce/`` holds files of a real micro LHCE study run by
``mdbench study run --preset micro --systems LHCE --seed 2026`` (GROMACS production ``prod.tpr``,
``prod.xtc``, ``prod.edr``, ``prod.mdp``; the run record; the analysis ``results.json``), with
``PROVENANCE.json`` (command, software versions, sha256 of every file). They are committed because a
micro production takes minutes; the tasks that build a box instead call ``mdbench.build`` at image
build time.

A task names the master files it uses in ``task.toml`` — ``[metadata] inputs = "micro_lhce: prod/prod.tpr
prod/prod.xtc"`` — and carries byte-identical copies under ``environment/app/`` (a Docker build context
cannot reach outside the task folder; git stores identical files once). :func:`check_copies` finds
copies that drifted; :func:`sync_copies` rewrites them; :func:`regenerate` reruns the pipeline and
replaces the master (``mdbench arena inputs --regenerate``). GROMACS trajectories differ between
machines, so regenerated files differ — the verifiers recompute every expected answer from the files
a task ships, so any regenerated set is consistent.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mdbench.arena.task import INPUTS_DIR, TASKS_DIR, Task, list_tasks
from mdbench.errors import InputError

#: Master file (relative to the set) → where it comes from in a study run directory (case LHCE).
MICRO_LHCE_SOURCES = {
    "prod/prod.tpr": "cases/LHCE/prod/prod.tpr", "prod/prod.xtc": "cases/LHCE/prod/prod.xtc",
    "prod/prod.edr": "cases/LHCE/prod/prod.edr", "prod/prod.mdp": "cases/LHCE/prod/prod.mdp",
    "run_record/events.jsonl": "run_record/events.jsonl", "run_record/attempts.jsonl": "run_record/attempts.jsonl",
    "run_record/registrations.jsonl": "run_record/registrations.jsonl",
    "run_record/stage_states.json": "run_record/stage_states.json",
    "run_record/observables.json": "run_record/observables.json", "analysis/results.json": "analysis/LHCE/results.json",
}
STUDY_COMMAND = ["study", "run", "--preset", "micro", "--systems", "LHCE", "--seed", "2026", "--threads", "1",
                 "--quiet"]


@dataclass(frozen=True)
class Copy:
    """One pipeline file a task uses: master path and the task's copy."""

    task: str
    master: Path
    copy: Path

    @property
    def state(self) -> str:
        """``ok``, ``missing`` or ``differs``."""
        if not self.copy.is_file():
            return "missing"
        return "ok" if _sha256(self.copy) == _sha256(self.master) else "differs"


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def task_inputs(task: Task, root: Path = INPUTS_DIR) -> list[Copy]:
    """The pipeline files ``task`` declares in ``[metadata] inputs`` (``"<set>: rel rel …"``)."""
    spec = task.metadata.get("inputs")
    if not spec or ":" not in spec or spec.startswith("mdbench.build"):
        return []
    name, _, files = spec.partition(":")
    out = []
    for rel in files.split():
        master = root / name.strip() / rel
        if not master.is_file():
            raise InputError(f"[metadata] inputs names {name.strip()}/{rel}, which is not in {root}", str(task.path))
        out.append(Copy(task.name, master, task.path / "environment" / "app" / rel))
    return out


def all_copies(tasks_dir: Path = TASKS_DIR) -> list[Copy]:
    return [c for t in list_tasks(tasks_dir) for c in task_inputs(t)]


def check_copies(tasks_dir: Path = TASKS_DIR) -> list[Copy]:
    """Copies that are missing or differ from the master."""
    return [c for c in all_copies(tasks_dir) if c.state != "ok"]


def sync_copies(tasks_dir: Path = TASKS_DIR) -> list[Copy]:
    """Rewrite every copy from the master; return those that changed."""
    changed = []
    for c in all_copies(tasks_dir):
        if c.state != "ok":
            c.copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(c.master, c.copy)
            changed.append(c)
    return changed


def write_provenance(set_dir: Path, command: list[str]) -> Path:
    """``PROVENANCE.json`` of a master set: command, versions, sha256 of every file."""
    from importlib.metadata import version

    gmx = subprocess.run(["gmx", "--version"], capture_output=True, text=True)
    gmx_line = next((l.split(":", 1)[1].strip() for l in gmx.stdout.splitlines() if "GROMACS version" in l), None)
    files = {str(p.relative_to(set_dir)): _sha256(p) for p in sorted(set_dir.rglob("*"))
             if p.is_file() and p.name != "PROVENANCE.json"}
    prov = {"command": "mdbench " + " ".join(command), "made_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "mdbench": version("mdbench"), "gromacs": gmx_line, "sha256": files,
            "note": "GROMACS trajectories differ between CPUs; verifiers recompute answers from these files"}
    path = set_dir / "PROVENANCE.json"
    path.write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
    return path


def regenerate(root: Path = INPUTS_DIR, *, keep_run: Path | None = None) -> Path:
    """Run the micro LHCE study again and replace ``root/micro_lhce`` (then :func:`sync_copies`)."""
    with tempfile.TemporaryDirectory(prefix="arena-inputs-") as tmp:
        run = Path(keep_run) if keep_run else Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "mdbench", *STUDY_COMMAND, "--out", str(run)], check=True)
        dest = root / "micro_lhce"
        for rel, src in MICRO_LHCE_SOURCES.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run / src, dest / rel)
        write_provenance(dest, STUDY_COMMAND + ["--out", "RUN_DIR"])
    sync_copies()
    return dest


#: What a task gets of a box built by mdbench.build (the audit files, packmol files and build.json —
#: which states the target density and every audit value — stay out).
BOX_FILES = ("LHCE.gro", "topol.top", "forcefield.itp", "LI.itp", "FSI.itp", "DMC.itp", "TTE.itp")


def build_micro_lhce_box(dest: Path, *, seed: int = 2026, extra: tuple[str, ...] = ()) -> Path:
    """Build the micro LHCE box with the pipeline's own ``mdbench.build`` into ``dest`` (tasks' build.sh).

    The topology's title line, which states the build's target density, is replaced; ``extra`` names
    further build files to keep (e.g. ``em_audit.mdp``).
    """
    from mdbench.build import build_system

    dest = Path(dest)
    with tempfile.TemporaryDirectory(prefix="arena-box-") as tmp:
        res = build_system("LHCE", "micro", Path(tmp) / "box", seed=seed)
        if not res.passed:
            raise InputError(f"the micro LHCE box failed its setup audits: {[a.name for a in res.audits if not a.passed]}")
        dest.mkdir(parents=True, exist_ok=True)
        for name in (*BOX_FILES, *extra):
            shutil.copyfile(Path(tmp) / "box" / name, dest / name)
    top = dest / "topol.top"
    lines = [("LHCE micro box (mdbench)" if line.startswith("LHCE preset=") else line)
             for line in top.read_text(encoding="utf-8").splitlines()]
    top.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


if __name__ == "__main__":  # python -m mdbench.arena.inputs box DEST [extra files...]
    if len(sys.argv) < 3 or sys.argv[1] != "box":
        sys.exit("usage: python -m mdbench.arena.inputs box DEST [EXTRA_BUILD_FILE...]")
    build_micro_lhce_box(Path(sys.argv[2]), extra=tuple(sys.argv[3:]))
