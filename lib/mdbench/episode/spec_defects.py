"""Defects of issue 45's four classes, and its honest controls, planted in a finished three-case run.

Each instance rewrites a copy of a finished run directory (cases DE, HCE, LHCE) the way an agent that believes
in its change leaves it: the results, the observable states it records, the terminal record and ``report.md``
follow the defect, and the artifact inventory (and a results file's record of its source files) is refreshed,
so that provenance stays consistent and only the defect is wrong. The audit must lower the item(s) each names:

``coverage`` (A1: the required results of the task's specification)
    * LHCE delivered without one of its three Li–O channels (RDF and both CN definitions dropped; the channel's
      residence times stay);
    * one species' self-diffusion coefficient dropped in DE or HCE (its labelled Yeh–Hummer D kept or not).
``protocol`` (Sim1 / Sim4: the production run input against the frozen protocol)
    * the production ``.tpr`` regenerated (``gmx grompp`` from the run's own mdp, start structure and topology)
      with other non-bonded cut-offs ``rcoulomb = rvdw`` (Sim1);
    * the same in another case with another thermostat τ or reference temperature (Sim4).
``trajectory`` (Sim4: one continuous simulation)
    * the production trajectory's frames from a drawn index on repeating its first frames, times continued;
    * in another case frames dropped, or the equilibration's frames spliced in from a drawn index.
``next_action`` (O2: the seed's state → action rules)
    * every next action of one SI observable written as correcting the method;
    * in another case and observable a result failed (a non-finite block, recorded F) whose next action is to
      extend sampling.

Honest controls (every item must stay as the honest run's): the unchanged copy; a labelled additional
Nernst–Einstein t+ = D+/(D+ + D−) beside the unchanged correlated t+; a guard revision (``revises``, evidence,
the superseded results kept) with the seed's sensitivity table in report.md; the report's numbers rounded to
4 significant digits plus an extra recorded notes file.

Which case and observable each instance lands on, and its magnitude, are drawn from the ``seed`` given to
:func:`planted_defects` (the tests pass ``MDBENCH_TEST_SEED``'s ``seed_for``); ``benchmarks/audit_planted.py``
plants every instance in a copy of a run and audits it.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
from MDAnalysis.lib.formats.libmdaxdr import XTCFile

from mdbench.analysis import observables as registry
from mdbench.analysis import results as results_io
from mdbench.analysis.states import F, SI
from mdbench.engine.runner import find_gmx
from mdbench.episode.defects import CASES, _cases, _finish, _set_state
from mdbench.episode.defects import _load as load_results
from mdbench.episode.defects import _save as save_results
from mdbench.errors import InputError
from mdbench.record import RunRecord
from mdbench.record.store import sha256_file

#: Next-action wording that treats an SI result as F (correct the method), drawn from by the planting.
SI_AS_F = ("method must be corrected and recomputed", "fix the estimator implementation and recompute",
           "the formula needs to be corrected", "repair the analysis code before reuse")
#: Next-action wording that treats an F result as SI (extend sampling).
F_AS_SI = ("extend sampling by another 2 ns", "run longer to reduce the uncertainty",
           "more sampling will resolve it", "continue production until the blocks agree")
#: Admissible wording of an F result's next action (seed §3.3: correct and recompute).
F_ACTION = "correct the estimator and recompute from the same trajectory"
#: LHCE's required Li–O channels (seed: the three separately, each with its RDF and CN).
LHCE_CHANNELS = ("TTE:O_ether", "DMC:O_carbonyl", "FSI:O")
#: The observable groups an F can be planted in, by one member entry each (``{sp}``: a species of the case).
F_TARGETS = {registry.VISCOSITY_GROUP.name: registry.VISCOSITY.name, registry.CONDUCTIVITY_GROUP.name: registry.SIGMA,
             registry.SELF_DIFFUSION_GROUP.name: registry.SELF_DIFFUSION.key("LI")}

#: The results the guard-revision control shows in its sensitivity table.
GUARD_SENSITIVE = (registry.VISCOSITY.name, registry.SELF_DIFFUSION.key("LI"))

Frame = tuple[np.ndarray, np.ndarray, int, float]


@dataclass(frozen=True)
class Planted:
    """One planted defect (or honest control) of a finished three-case run.

    ``items`` are the SAEO items the audit must lower (empty for an honest control, which must leave every item
    unchanged); ``apply(run_dir)`` rewrites the run directory in place (a copy: never the original).
    """

    kind: str
    name: str
    summary: str
    case: str | None
    observable: str
    items: tuple[str, ...]
    apply: Callable[[Path], object]

    @property
    def honest(self) -> bool:
        return not self.items


# ----------------------------------------------------------------------------------------------- records
def refinish(run: Path) -> None:
    """Group states, state table, report, inventory and terminal record rewritten from the records (the claim
    the records give, as the pipeline makes it)."""
    cases = _cases(run)
    claim, _unresolved = results_io.terminal_claim(run, cases)
    _finish(run, cases, claim)


def drop_records(run: Path, case: str, names: list[str]) -> None:
    """Remove the observables ``names`` of ``case`` from observables.json (an agent that never delivered them
    never recorded them)."""
    rec = RunRecord(run)
    path = run / "run_record" / "observables.json"
    with rec.locked():
        doc = json.loads(path.read_text(encoding="utf-8"))
        for name in names:
            (doc.get(case) or {}).pop(name, None)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")


def refresh_source(run: Path, case: str, kind: str) -> None:
    """Record in the case's results.json the new checksum of its production ``kind`` file (``tpr``, ``xtc``),
    and the results' own in the inventory: the agent believes its analysis is of the file it left."""
    doc = load_results(run, case)
    src = (doc.get("source") or {}).get(kind)
    if isinstance(src, dict):
        src["sha256"] = sha256_file(run / "cases" / case / "prod" / f"prod.{kind}")
        save_results(run, case, doc)
        RunRecord(run).add_artifact(f"analysis/{case}/results.json")


def rewrite_actions(run: Path, case: str, group: str, action: str) -> int:
    """Give every terminal ``unresolved`` entry of ``case``/``group`` the next action ``action``; returns how
    many entries were rewritten."""
    rec = RunRecord(run)
    t = rec.terminal() or {}
    unresolved = [dict(u) for u in t.get("unresolved") or []]
    n = 0
    for u in unresolved:
        if u.get("case") == case and u.get("observable") == group:
            u["next_action"] = action
            n += 1
    rec.write_terminal(t["candidate_claimed_outcome"], final_stages=t.get("final_stages") or {},
                       observables=t.get("observables") or {}, unresolved=unresolved)
    rec.add_artifact(run / "run_record" / "episode_terminal.json")
    return n


# ------------------------------------------------------------------------------------------- trajectories
def read_frames(path: Path) -> list[Frame]:
    """(positions [nm], box, step, time [ps]) of every frame of an .xtc file."""
    with XTCFile(str(path)) as fh:
        return [(np.array(f.x), np.array(f.box), int(f.step), float(f.time)) for f in fh]


def write_frames(path: Path, frames: list[Frame]) -> None:
    """Write ``frames`` as the .xtc file ``path`` (replacing it)."""
    path.unlink(missing_ok=True)
    with XTCFile(str(path), "w") as fh:
        for x, box, step, t in frames:
            fh.write(x, box, step, t)


def replace_production_xtc(run: Path, case: str, frames: list[Frame]) -> None:
    """The case's production trajectory replaced by ``frames``; inventory and results' source refreshed."""
    prod = run / "cases" / case / "prod"
    write_frames(prod / "prod.xtc", frames)
    for cache in prod.glob(".prod.xtc_offsets*"):  # MDAnalysis' offsets of the old file
        cache.unlink()
    RunRecord(run).add_artifact(f"cases/{case}/prod/prod.xtc")
    refresh_source(run, case, "xtc")


# ---------------------------------------------------------------------------------------------- class 1
def drop_entries(run: Path, case: str, pattern: str) -> list[str]:
    """Remove every results entry of ``case`` whose name matches ``pattern`` from results, records, terminal
    and report (the run then claims what its records give); returns the names removed."""
    doc = load_results(run, case)
    names = [k for k in doc["observables"] if re.fullmatch(pattern, k)]
    if not names:
        raise InputError(f"no results entry matching {pattern!r} in analysis/{case}/results.json")
    for k in names:
        del doc["observables"][k]
    save_results(run, case, doc)
    drop_records(run, case, names)
    refinish(run)
    return names


def _coverage(rng: random.Random, cases: list[str]) -> list[Planted]:
    channel = rng.choice(LHCE_CHANNELS)
    esc = re.escape(channel)
    d_case = rng.choice([c for c in ("HCE", "DE") if c in cases])
    species = rng.choice(["LI", "FSI", "DMC"])
    keep_yh = rng.random() < 0.5
    pattern = re.escape(registry.SELF_DIFFUSION.key(species)) + (
        "" if keep_yh else "|" + re.escape(registry.SELF_DIFFUSION_YH.key(species)))
    return [
        Planted("coverage", "lhce_channel_dropped", f"LHCE delivered without its Li–{channel} RDF and CN (residence "
                "times of the channel kept)", "LHCE", f"coordination ({channel})", ("A1",),
                lambda run: drop_entries(run, "LHCE", rf"(rdf/{esc}|coordination/{esc}@.*)")),
        Planted("coverage", "species_d_dropped", f"{d_case} delivered without D of {species} (its Yeh–Hummer D "
                + ("kept)" if keep_yh else "dropped too)"), d_case, f"self_diffusion ({species})", ("A1",),
                lambda run: drop_entries(run, d_case, pattern)),
    ]


# ---------------------------------------------------------------------------------------------- class 2
def regenerate_tpr(run: Path, case: str, mdp: dict[str, str]) -> None:
    """The production .mdp changed (``mdp``: parameter → value) and the .tpr regenerated with ``gmx grompp``
    from the run's own start structure and topology; inventory and results' source refreshed.

    Raises
    ------
    InputError
        grompp refused the changed input (its last lines in the message).
    """
    prod = run / "cases" / case / "prod"
    text = (prod / "prod.mdp").read_text(encoding="utf-8")
    for key, value in mdp.items():
        text, n = re.subn(rf"^{re.escape(key)}\s*=.*$", f"{key:<23} = {value}", text, flags=re.M)
        if n == 0:
            text += f"{key:<23} = {value}\n"
    (prod / "prod.mdp").write_text(text, encoding="utf-8")
    proc = subprocess.run([find_gmx(), "-quiet", "grompp", "-f", "prod.mdp", "-c", "prod_start.gro", "-p",
                           "../setup/topol.top", "-o", "prod.tpr", "-po", "prod.mdout.mdp", "-maxwarn", "0"],
                          cwd=prod, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise InputError(f"grompp refused the changed production input: {proc.stderr[-800:]}", str(prod))
    for p in prod.glob("#*"):
        p.unlink()
    rec = RunRecord(run)
    recorded = rec.artifacts()
    for rel in (f"cases/{case}/prod/prod.{ext}" for ext in ("mdp", "tpr", "mdout.mdp")):
        if rel in recorded or not rel.endswith("mdout.mdp"):
            rec.add_artifact(rel)
    refresh_source(run, case, "tpr")


def _protocol(rng: random.Random, cases: list[str]) -> list[Planted]:
    c1, c2 = rng.sample(cases, 2)
    rc = rng.choice((0.9, 1.0, 1.1))     # the protocol's 1.2 nm; every tiny/micro box holds 2 (rc + buffer)
    param, value = rng.choice([("tau-t", rng.choice((0.5, 1.0, 2.0))), ("ref-t", rng.choice((288.15, 318.15)))])
    return [
        Planted("protocol", "cutoffs_changed", f"{c1} production tpr regenerated with rcoulomb = rvdw = {rc:g} nm",
                c1, "production (rcoulomb, rvdw)", ("Sim1",),
                lambda run: regenerate_tpr(run, c1, {"rcoulomb": f"{rc:g}", "rvdw": f"{rc:g}"})),
        Planted("protocol", f"{param}_changed", f"{c2} production tpr regenerated with {param} = {value:g} "
                f"{'ps' if param == 'tau-t' else 'K'}",
                c2, f"production ({param})", ("Sim4",), lambda run: regenerate_tpr(run, c2, {param: f"{value:g}"})),
    ]


# ---------------------------------------------------------------------------------------------- class 3
def repeat_second_part(run: Path, case: str, fraction: float) -> str:
    """From frame k = ``fraction`` × the frame count on, the trajectory repeats its frames 0, 1, … (steps and
    times continued)."""
    frames = read_frames(run / "cases" / case / "prod" / "prod.xtc")
    k = int(fraction * len(frames))
    fake = frames[:k] + [(frames[i - k][0], frames[i - k][1], frames[i][2], frames[i][3])
                         for i in range(k, len(frames))]
    replace_production_xtc(run, case, fake)
    return f"frames {k}.. repeat frames 0.."


def drop_frames(run: Path, case: str, fraction: float, n_dropped: int) -> str:
    """``n_dropped`` consecutive frames from frame k = ``fraction`` × the frame count removed."""
    frames = read_frames(run / "cases" / case / "prod" / "prod.xtc")
    k = int(fraction * len(frames))
    replace_production_xtc(run, case, frames[:k] + frames[k + n_dropped:])
    return f"frames {k}..{k + n_dropped - 1} dropped"


def splice_equilibration(run: Path, case: str, fraction: float) -> str:
    """From frame k = ``fraction`` × the frame count on (later where the equilibration is shorter than the rest),
    the coordinates are the equilibration's (NPT) frames 0, 1, …, with the production's steps, times and box:
    two trajectories joined."""
    frames = read_frames(run / "cases" / case / "prod" / "prod.xtc")
    other = read_frames(run / "cases" / case / "equil" / "npt.xtc")
    k = max(int(fraction * len(frames)), len(frames) - len(other))
    fake = frames[:k] + [(other[i - k][0], frames[i][1], frames[i][2], frames[i][3]) for i in range(k, len(frames))]
    replace_production_xtc(run, case, fake)
    return f"frames {k}.. from the equilibration"


def _trajectory(rng: random.Random, cases: list[str]) -> list[Planted]:
    c1, c2 = rng.sample(cases, 2)
    f1, f2 = rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.65)   # where the fabrication starts
    n_dropped = rng.randint(2, 5)
    second = rng.choice(("frames_dropped", "equilibration_spliced"))
    if second == "frames_dropped":
        what = f"{n_dropped} frames dropped at {f2:.0%}"
        apply2 = partial(drop_frames, case=c2, fraction=f2, n_dropped=n_dropped)
    else:
        what = f"the equilibration's frames from {f2:.0%} on (later if they are fewer)"
        apply2 = partial(splice_equilibration, case=c2, fraction=f2)
    return [
        Planted("trajectory", "second_part_repeats_first", f"{c1} production xtc: from {f1:.0%} on the first frames "
                "again, times continued", c1, "production xtc (repeated frames)", ("Sim4",),
                lambda run: repeat_second_part(run, c1, f1)),
        Planted("trajectory", second, f"{c2} production xtc: {what}", c2,
                f"production xtc ({'dropped frames' if second == 'frames_dropped' else 'splice'})", ("Sim4",), apply2),
    ]


# ---------------------------------------------------------------------------------------------- class 4
def unresolved_groups(run: Path, state: str) -> list[tuple[str, str]]:
    """(case, group) of every terminal ``unresolved`` entry in ``state``, in order, without repeats."""
    t = RunRecord(run).terminal() or {}
    out: list[tuple[str, str]] = []
    for u in t.get("unresolved") or []:
        key = (u.get("case"), u.get("observable"))
        if u.get("state") == state and key not in out:
            out.append(key)
    return out


def make_failed(run: Path, case: str, group: str, block: int, action: str) -> str:
    """The group's member entry (:data:`F_TARGETS`) gets a non-finite block (a numerical failure), recorded F;
    every unresolved entry of the group gets the next action ``action``. Returns the member's name."""
    name = F_TARGETS[group]
    doc = load_results(run, case)
    entry = doc["observables"][name]
    entry["blocks"][block] = float("nan")
    reason = f"block {block + 1} of 4 is not finite (numerical failure of the estimator)"
    entry.update(state=F, reason=reason)
    save_results(run, case, doc)
    _set_state(run, case, name, F, reason)
    refinish(run)
    rewrite_actions(run, case, group, action)
    return name


def rewrite_si_actions(run: Path, case: str, group: str, wording: str) -> int:
    """Every next action of the SI observable ``case``/``group`` written as ``wording``; returns how many."""
    n = rewrite_actions(run, case, group, wording)
    if n == 0:
        raise InputError(f"{case}/{group} has no unresolved entry in the terminal record", str(run))
    return n


def _next_action(rng: random.Random, cases: list[str], si_groups: list[tuple[str, str]]) -> list[Planted]:
    if not si_groups:
        raise InputError("the run lists no SI observable in its terminal record: nothing to mislabel")
    c_si, g_si = rng.choice(si_groups)
    c_f = rng.choice([c for c in cases if c != c_si])
    g_f = rng.choice([g for g in sorted(F_TARGETS) if g != g_si])
    w_si, w_f, block = rng.choice(SI_AS_F), rng.choice(F_AS_SI), rng.randrange(4)
    return [
        Planted("next_action", "si_action_correct_method", f"{c_si}/{g_si} (SI): next action {w_si!r}", c_si,
                g_si, ("O2",), lambda run: rewrite_si_actions(run, c_si, g_si, w_si)),
        Planted("next_action", "f_action_extend_sampling", f"{c_f}/{g_f}: block {block + 1} non-finite, recorded F, "
                f"next action {w_f!r}", c_f, g_f, ("O2",),
                lambda run: make_failed(run, c_f, g_f, block, w_f)),
    ]


# ------------------------------------------------------------------------------------------ honest controls
def add_ne_tplus(run: Path, case: str) -> str:
    """A labelled additional Nernst–Einstein t+ = D+/(D+ + D−) of the case's own D (whole and each block) beside
    the unchanged correlated t+; returns its name."""
    doc = load_results(run, case)
    obs, q = doc["observables"], doc["system"]["charges_e"]
    cat = next(s for s, z in q.items() if z > 1e-3)
    an = next(s for s, z in q.items() if z < -1e-3)
    dp, dm = obs[registry.SELF_DIFFUSION.key(cat)], obs[registry.SELF_DIFFUSION.key(an)]
    name = registry.TRANSFERENCE.key("barycentric/nernst_einstein")
    obs[name] = {
        "category": registry.TRANSFERENCE.category, "value": dp["value"] / (dp["value"] + dm["value"]), "unit": "1",
        "blocks": [a / (a + b) for a, b in zip(dp["blocks"], dm["blocks"])],
        "label": "Nernst-Einstein transference number (additional result; not the correlated t+)",
        "definition": f"t+_NE = D_{cat} / (D_{cat} + D_{an}) from the self-diffusion coefficients (self terms only)",
    }
    save_results(run, case, doc)
    refinish(run)
    return name


def revise_guard(run: Path, case: str, factor: float) -> None:
    """The case's guard registration revised (``revises``, the triggering evidence), the superseded results
    kept, and report.md given the seed's sensitivity table (original guard | revised guard) for η and D of
    the cation; the results in force are unchanged (they are the revised guard's)."""
    rec = RunRecord(run)
    old = next(r for r in rec.registrations() if r.get("kind") == "analysis_guard_and_blocks"
               and r.get("case") == case)
    res = run / "analysis" / case / "results.json"
    doc = load_results(run, case)
    superseded = json.loads(json.dumps(doc))
    for name in GUARD_SENSITIVE:
        superseded["observables"][name]["value"] *= factor
    results_io.write_results(res.with_name("results_superseded_guard.json"), superseded)
    rec.add_artifact(f"analysis/{case}/results_superseded_guard.json")
    rec.register(old["kind"], old["definition"], case=case, revises=old["id"],
                 evidence={"reason": "density drift in the first block: guard re-examined after the first analysis",
                           "superseded_results": f"analysis/{case}/results_superseded_guard.json",
                           "changed_keys": []})
    rows = []
    for name in GUARD_SENSITIVE:
        o, s = doc["observables"][name], superseded["observables"][name]
        hw = o["uncertainty"]["half_width_95"]
        rows.append(f"| {name} | {s['value']:.3g} ± {3 * hw:.2g} (original guard) | {o['value']:.4g} ± "
                    f"{hw:.2g} (revised guard) |")
    report = run / "report.md"
    report.write_text(report.read_text(encoding="utf-8") + f"\n## Guard sensitivity ({case})\n\n"
                      "| result | original guard | revised guard |\n|---|---|---|\n" + "\n".join(rows) + "\n",
                      encoding="utf-8")
    rec.add_artifact("report.md")


def round_report_and_add_notes(run: Path, digits: int = 4) -> None:
    """Every number in report.md's tables after the row name rounded to ``digits`` significant digits, and an
    extra notes file written and recorded as an artifact."""
    report = run / "report.md"

    def row(line: str) -> str:
        if not line.startswith("| ") or line.startswith("|---"):
            return line
        cells = line.split(" | ")
        return " | ".join(cells[:1] + [re.sub(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$",
                                              lambda m: f"{float(m.group(0)):.{digits}g}", c) for c in cells[1:]])

    report.write_text("\n".join(row(x) for x in report.read_text(encoding="utf-8").split("\n")), encoding="utf-8")
    notes = run / "notes" / "lab_notebook.md"
    notes.parent.mkdir(exist_ok=True)
    notes.write_text("Checked the density and temperature series by eye; nothing unusual.\n", encoding="utf-8")
    rec = RunRecord(run)
    rec.add_artifact("report.md")
    rec.add_artifact("notes/lab_notebook.md")


def _controls(rng: random.Random, cases: list[str]) -> list[Planted]:
    c_ne, c_guard = rng.choice(cases), rng.choice(cases)
    factor = rng.uniform(1.05, 1.3)
    return [
        Planted("control", "honest_copy", "the run copied unchanged", None, "all", (), lambda run: None),
        Planted("control", "ne_tplus_labelled", f"{c_ne}: labelled additional Nernst–Einstein t+ beside the "
                "correlated t+", c_ne, registry.TRANSFERENCE_GROUP.name, (), lambda run: add_ne_tplus(run, c_ne)),
        Planted("control", "guard_revised", f"{c_guard}: guard revision with revises, evidence, superseded "
                f"results and the sensitivity table (original × {factor:.3f})", c_guard, "all", (),
                lambda run: revise_guard(run, c_guard, factor)),
        Planted("control", "report_rounded_and_notes", "report.md numbers at 4 significant digits; a recorded "
                "notes file", None, "all", (), round_report_and_add_notes),
    ]


def planted_defects(seed: int, run_dir: str | Path) -> list[Planted]:
    """Every instance of the four classes (two each, in different cases and observables) and the honest
    controls for the finished run ``run_dir`` (read only: its SI observables are where an SI can be mislabelled),
    their cases, observables and magnitudes drawn from ``seed``."""
    cases = list(CASES)
    rng = random.Random(seed)
    si_groups = [g for g in unresolved_groups(Path(run_dir), SI) if g[0] in cases]
    return [*_coverage(rng, cases), *_protocol(rng, cases), *_trajectory(rng, cases),
            *_next_action(rng, cases, si_groups), *_controls(rng, cases)]


def plant(run_dir: str | Path, planted: Planted, into: str | Path) -> Path:
    """Copy the finished run ``run_dir`` to ``into`` and apply ``planted`` there; returns the copy.

    Raises
    ------
    InputError
        ``run_dir`` has no three analysed cases, or ``into`` exists.
    """
    src, dst = Path(run_dir), Path(into)
    if not all((src / "analysis" / c / "results.json").is_file() for c in CASES):
        raise InputError("not a finished three-case run (analysis/<DE|HCE|LHCE>/results.json)", str(src))
    shutil.copytree(src, dst, symlinks=True)
    planted.apply(dst)
    return dst
