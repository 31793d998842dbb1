"""The two trees ``mdbench sdl compile`` writes: what a coordinator may see, and what only the evaluator may.

Layout of a compile folder::

    agent/                               public (for people); a coordinator session sees one file of it
      README.md                          the protocol in prose
      action_schema.json                 JSON schema of one action
      forecast_row_schema.json           JSON schema of one forecast row
      index.json                         assignment id → {agent_view_sha256, horizon, full_length}
      <assignment_id>.json               agent view: public ids, descriptors, initial-context outcomes
    evaluator/                           folders 0700, files 0600 (:func:`protect_evaluator`); hidden from coordinators
      ledger.json                        the whole record (outcomes, evidence, reviews)
      keys.json                          id salt and chain-signing key of this compile
      assignments/<assignment_id>.json   frozen assignments (ledger ids, public-id map, budgets, scoring rule)
      index.json                         assignment id → sha256

No file of the agent tree holds an outcome of its own assignment's candidate, held-out or future experiments,
a ledger id or a key. The *tree* as a whole does hold outcomes of every panel experiment: the rotations put each
block in some assignment's initial context. That is safe only because (1) public ids are salted per assignment
(the same experiment has unrelated ids in different files) and (2) a coordinator session never sees the tree:
the sandbox exposes only :func:`session_view_files` of its own assignment (:mod:`mdbench.sdl.confine`), and
sessions are fresh (private ``/tmp``, ``/dev/shm``, IPC …), so nothing learnt in one assignment's session
reaches another's. The tree may be published whole for people.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mdbench.errors import InputError
from mdbench.sdl.compiler import Assignment, EvaluatorKeys, load_assignment
from mdbench.sdl.environment import ACTION_SCHEMA, FORECAST_ROW_SCHEMA, PROTOCOL, agent_view
from mdbench.sdl.ledger import Ledger, load_ledger_json, save_ledger_json, sha256_json

AGENT_README = f"""# Agent-visible campaign files ({PROTOCOL})

One JSON file per frozen campaign assignment: record description, budgets are sent with every state,
initial-context experiments (descriptors and recorded outcomes), candidate experiments and the held-out
query panel (descriptors only). Experiment ids are salted per assignment: the same experiment has different
ids in different assignments. A coordinator session sees only its own assignment's file (path in
`$MDBENCH_SDL_ASSIGNMENT`), the schemas and this README — never the other assignments of the compile.

Outcomes of candidates and
held-out experiments are never here: they become visible only through the protocol (inspect_evidence,
request_review). `action_schema.json` is the JSON schema of one action; `forecast_row_schema.json` that of
one forecast row.
"""


@dataclass(frozen=True)
class Compiled:
    """A loaded compile folder."""

    root: Path
    ledger: Ledger
    assignments: list[Assignment]
    keys: EvaluatorKeys

    @property
    def agent_dir(self) -> Path:
        return self.root / "agent"

    @property
    def evaluator_dir(self) -> Path:
        return self.root / "evaluator"


def _write_json(path: Path, obj, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True), encoding="utf-8")
    if mode is not None:
        os.chmod(path, mode)


def protect_evaluator(ev: str | Path) -> list[str]:
    """Make the evaluator tree private to its owner: folders 0700, files 0600 (links are not followed).

    Called when a compile is written and whenever one is loaded (a compile written before this rule is tightened
    then). Returns the paths that could not be changed (not owned by the caller).
    """
    failed = []
    for folder, dirs, files in os.walk(ev, followlinks=False):
        for name, mode in [(".", 0o700)] + [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
            p = os.path.normpath(os.path.join(folder, name))
            try:
                if not os.path.islink(p):
                    os.chmod(p, mode)
            except OSError:
                failed.append(p)
    return failed


def write_compiled(folder: str | Path, ledger: Ledger, assignments: list[Assignment], keys: EvaluatorKeys) -> Path:
    """Write the agent and evaluator trees (see module docstring); returns the folder."""
    root = Path(folder)
    ev, ag = root / "evaluator", root / "agent"
    ev.mkdir(parents=True, exist_ok=True)
    os.chmod(ev, 0o700)
    if any(a.evaluator_key_sha256 != keys.key_sha256 for a in assignments):
        raise InputError("assignments were compiled with other evaluator keys", str(root))
    save_ledger_json(ledger, ev / "ledger.json")
    _write_json(ev / "keys.json", keys.to_dict(), 0o600)
    for a in assignments:
        _write_json(ev / "assignments" / f"{a.assignment_id}.json", a.to_dict())
    _write_json(ev / "index.json", {a.assignment_id: a.sha256 for a in assignments})
    protect_evaluator(ev)
    ag.mkdir(parents=True, exist_ok=True)
    index = {}
    for a in assignments:
        view = agent_view(ledger, a)
        _write_json(ag / f"{a.assignment_id}.json", view)
        index[a.assignment_id] = {"agent_view_sha256": sha256_json(view), "horizon": a.horizon,
                                  "full_length": a.full_length}
    _write_json(ag / "index.json", index)
    _write_json(ag / "action_schema.json", ACTION_SCHEMA)
    _write_json(ag / "forecast_row_schema.json", FORECAST_ROW_SCHEMA)
    (ag / "README.md").write_text(AGENT_README, encoding="utf-8")
    return root


def session_view_files(agent_dir: str | Path, assignment_id: str | None) -> list[Path]:
    """The files of the agent tree one coordinator session of ``assignment_id`` may read: its own assignment
    file, the two schemas and the README (never ``index.json`` or another assignment's file)."""
    ag = Path(agent_dir)
    names = ["README.md", "action_schema.json", "forecast_row_schema.json"]
    if assignment_id is not None:
        names.append(f"{assignment_id}.json")
    out = []
    for n in names:
        p = ag / n
        if p.is_symlink() or not p.is_file():
            raise InputError(f"agent view file {n} is missing or not a regular file; recompile with "
                             "`mdbench sdl compile`", str(p))
        out.append(p)
    return out


def load_compiled(folder: str | Path) -> Compiled:
    """Read and verify a compile folder: every assignment against its hash, the ledger and the keys."""
    root = Path(folder)
    ev = root / "evaluator"
    index_path = ev / "index.json"
    if not index_path.exists():
        raise InputError("no evaluator/index.json — write this folder with `mdbench sdl compile --out`", str(root))
    ledger = load_ledger_json(ev / "ledger.json")
    try:
        kd = json.loads((ev / "keys.json").read_text(encoding="utf-8"))
        keys = EvaluatorKeys(str(kd["salt"]), str(kd["chain_key"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"evaluator keys unreadable ({exc}); recompile with `mdbench sdl compile`",
                         str(ev / "keys.json")) from exc
    try:
        ids = json.loads(index_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", str(index_path), exc.lineno) from exc
    protect_evaluator(ev)
    asgs = []
    for aid, sha in ids.items():
        a = load_assignment(ev / "assignments" / f"{aid}.json", ledger)
        if a.sha256 != sha:
            raise InputError(f"{aid}: sha256 differs from index.json", str(index_path))
        if a.evaluator_key_sha256 != keys.key_sha256:
            raise InputError(f"{aid}: was compiled with another evaluator key than keys.json holds",
                             str(ev / "keys.json"))
        asgs.append(a)
    return Compiled(root.resolve(), ledger, asgs, keys)
