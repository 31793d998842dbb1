"""Episode-level checks of a run against its own record (issue 37, classes 3, 5, 7, 8 and the report).

* Gates from the record (Sim3, E5): the run's ``gate_evaluated`` events for equilibration — production
  entered after a failed gate that no later recorded gate passed is Sim3 = 0 (``production_after_failed_gate``);
  a recorded gate whose own checks contradict its verdict (a value beyond its threshold by the stated
  relation) is ``gate_record_inconsistent`` (Sim3 = 0, E5); a stage state ``valid`` where the last gate
  of that stage failed is ``stage_state_contradicts_gate`` (E5).
* The production as simulated (Sim4, E5): the production ``.tpr``'s thermostat target (``gmx dump``, a
  reader; nothing from the run is executed) against the case's target temperature
  (``production_state_point_differs``, Sim4 = 0); the log's last step time, the trajectory's end and the
  ledger's completed steps agree (``production_length_disagrees``, Sim4 = 0 and E5).
* MD files on disk that no ledger row claims (``md_files_unclaimed``, E1 ≤ ½, E5 ≤ ½): hidden budget use.
* Lineage artifacts (E1, :func:`mdbench.audit.fabrication.lineage_artifacts`).
* Report numbers per case (E5): numbers in a ``report.md`` section whose header names one case against
  that case's results (the whole-report check drops names two cases share).
* E5 is not 1 when O5 finds the terminal claim contradicted by the evidence (``claim_contradicted``).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
import tempfile
from typing import Any

from mdbench.audit.amend import cap
from mdbench.audit.codes import rule
from mdbench.audit.model import PER_CASE_ITEMS, Finding, Judgment
from mdbench.audit.runread import canonical_stage

log = logging.getLogger(__name__)
REC = "run_record"
#: Largest |thermostat target - case target| accepted [K].
REF_T_TOL_K = 0.5
MD_SUFFIXES = (".xtc", ".trr", ".edr")


# ------------------------------------------------------------------------------------------------ gates
def _gate_events(run: Any, case: str, stage: str) -> list[tuple[int, dict]]:
    out = []
    for _line, ev in run.events:
        p = ev.get("payload") if isinstance(ev.get("payload"), dict) else {}
        if ev.get("type") == "gate_evaluated" and p.get("case") == case and \
                canonical_stage(str(p.get("stage", p.get("gate", "")))) == stage:
            out.append((int(ev["id"]) if isinstance(ev.get("id"), int) else 0, p))
    return out


_REL = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "≤": lambda a, b: a <= b, "≥": lambda a, b: a >= b}


def _gate_contradictions(p: dict) -> list[str]:
    """Checks of a recorded gate whose value and threshold contradict their own ``passed`` flag or the verdict."""
    bad = []
    checks = p.get("checks") if isinstance(p.get("checks"), list) else []
    any_failed = False
    for c in checks:
        if not isinstance(c, dict):
            continue
        v, t, rel = c.get("value"), c.get("threshold"), str(c.get("relation", "")).strip()
        ok = c.get("passed")
        if isinstance(v, (int, float)) and isinstance(t, (int, float)) and not isinstance(v, bool) and \
                not isinstance(t, bool) and rel in _REL and math.isfinite(v) and math.isfinite(t):
            truth = _REL[rel](float(v), float(t))
            if isinstance(ok, bool) and ok != truth:
                bad.append(f"check {c.get('name')}: {v} {rel} {t} is {truth}, recorded passed={ok}")
            ok = truth
        if ok is False:
            any_failed = True
    if p.get("passed") is True and any_failed:
        bad.append("the gate is recorded passed while one of its own checks fails")
    return bad


def gate_findings(run: Any, case: str) -> tuple[list[str], list[str]]:
    """(Sim3 problems, E5 problems) of one case from its recorded equilibration gates and stage states."""
    sim3, e5 = [], []
    evs = _gate_events(run, case, "equil")
    if evs:
        last_id, last = evs[-1]
        from mdbench.audit.simulation import production_attempts  # noqa: PLC0415

        prod_entered = bool(production_attempts(run, case)) or any(
            a.get("case") == case and canonical_stage(str(a.get("stage", a.get("kind", "")))) == "prod"
            for a in run.attempts.values())
        if last.get("passed") is False and prod_entered and not any(p.get("passed") is True for _i, p in evs
                                                                     if _i > last_id):
            sim3.append(f"production entered after the recorded equilibration gate (event {last_id}) FAILED "
                        f"({str(last.get('reason', ''))[:160]}) and no later recorded gate passed")
        for eid, p in evs:
            for b in _gate_contradictions(p):
                sim3.append(f"gate event {eid}: {b}")
                e5.append(f"{case}: gate event {eid}: {b}")
    again = reevaluate_registered_gate(run, case)
    if again is not None:
        sim3.append(again)
    for stage in ("em", "equil"):
        g = _gate_events(run, case, stage)
        st = run.stage_state(case, stage)
        if g and isinstance(st, dict) and st.get("state") == "valid" and g[-1][1].get("passed") is False:
            e5.append(f"{case}: stage_states.json says {stage} valid, its last gate_evaluated event ({g[-1][0]}) "
                      "says FAILED")
    return sim3, e5


_GATE_ARGS = ("target_temperature_K", "observables", "nskip", "min_effective_samples", "max_t0_fraction",
              "temperature_tolerance_K", "max_density_drift_rel")


def reevaluate_registered_gate(run: Any, case: str) -> str | None:
    """:func:`_reevaluate_registered_gate`, once per case and audit (the audit computes it while the reanalysis
    runs in its child process, :func:`mdbench.audit.core._case_pass`; the E/O pass reads it here)."""
    cache = run.fs.__dict__.setdefault("_gate_reevaluated", {})
    if case not in cache:
        cache[case] = _reevaluate_registered_gate(run, case)
    return cache[case]


def _reevaluate_registered_gate(run: Any, case: str) -> str | None:
    """The run's registered equilibration gate (the definition in force; :func:`mdbench.engine.gates.
    equilibration_gate`'s parameters) re-evaluated on its last equilibration energy file; why it fails, if it
    does. None where the run registered no such gate or the file cannot be read (Sim3 reports that)."""
    from mdbench.audit.simulation import _pick, _stage_attempt_artifacts  # noqa: PLC0415

    reg = next((r for r in run.in_force("gate", "equilibration", case=case)
                if isinstance(r.get("definition"), dict) and r["definition"].get("gate") == "equilibration"
                and "max_density_drift_rel" in r["definition"]), None)
    if reg is None:
        return None
    d = reg["definition"]
    kw: dict[str, Any] = {}
    try:
        for k in _GATE_ARGS:
            if k in d:
                v = d[k]
                kw[k] = [str(x) for x in v][:8] if k == "observables" else (int(v) if k == "nskip" else float(v))
        if "target_temperature_K" not in kw or "observables" not in kw:
            return None
    except (TypeError, ValueError):
        return None
    edrs = _pick(run, case, "equil", ".edr", _stage_attempt_artifacts(run, case, "equil"))
    npt = [e for e in edrs if "npt" in e.rsplit("/", 1)[-1].lower()]
    rel = (npt or edrs or [None])[-1]
    if rel is None:
        return None
    try:
        from mdbench.analysis.thermo import read_energy_file  # noqa: PLC0415 - header checked before pyedr reads it
        from mdbench.engine.gates import equilibration_gate  # noqa: PLC0415

        path = run.fs.resolve(rel)
        read_energy_file(str(path))
        res = equilibration_gate(str(path), **kw)
    except Exception as exc:  # noqa: BLE001 - unreadable or too short: Sim3 reports the file itself
        log.info("registered gate not re-evaluated on %s: %s", rel, exc)
        return None
    if res.passed:
        return None
    return (f"the run's registered equilibration gate ({reg.get('id')}), re-evaluated on {rel}, fails: "
            f"{res.reason[:240]}")


# ------------------------------------------------------------------------------------------------ production
_DUMP_LINE = re.compile(r"^\s*(ref-t|ref_t|tcoupl|pcoupl|nsteps|dt|tinit)\s*[:=]\s*(.+?)\s*$", re.M)


#: Largest ``gmx dump`` output read [bytes]; a longer dump leaves the force-field fingerprint unset.
MAX_DUMP_BYTES = 64 << 20
_LJ = re.compile(r"^\s*functype\[\d+\]=LJ_SR,\s*(.*)$", re.M)
_ATOM = re.compile(r"^\s*atom\[\s*\d+\]=\{type=\s*(\d+).*?q=\s*([-+0-9.eE]+)", re.M)


def _regular(path: Any) -> bool:
    """True for a regular file (never a FIFO or device a run planted; links are resolved inside the run)."""
    import os  # noqa: PLC0415
    import stat  # noqa: PLC0415

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _bounded_output(argv: list[str], max_bytes: int, timeout_s: float) -> tuple[bytes, int | None]:
    """stdout of ``argv`` (stdin closed, stderr dropped, in a fresh temporary directory), read up to
    ``max_bytes`` + 1 bytes; the process is killed when it writes more or runs past ``timeout_s``.
    Returns (output, return code or None when killed)."""
    import os  # noqa: PLC0415
    import selectors  # noqa: PLC0415
    import time  # noqa: PLC0415

    chunks: list[bytes] = []
    n = 0
    with tempfile.TemporaryDirectory(prefix="mdbench-dump-") as tmp:
        proc = subprocess.Popen(argv, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        killed = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or n > max_bytes:
                    proc.kill()
                    killed = True
                    break
                if not sel.select(min(left, 1.0)):
                    continue
                data = os.read(proc.stdout.fileno(), 1 << 20)
                if not data:
                    break
                chunks.append(data)
                n += len(data)
        finally:
            sel.close()
            proc.stdout.close()
            rc = proc.wait()
    return b"".join(chunks), None if killed else rc


def _dump(run: Any, rel: str) -> tuple[dict[str, str], tuple | None, dict | None]:
    """:func:`_dump_now`, or the result of its :func:`prefetch`."""
    cache = run.fs.__dict__.setdefault("_tpr_dump", {})
    fut = run.fs.__dict__.get("_tpr_dump_futures", {}).pop(rel, None)
    if rel not in cache and fut is not None:
        try:
            cache[rel] = fut.result(timeout=120)
        except Exception:  # noqa: BLE001 - the prefetch failed: dump here
            pass
    if rel not in cache:
        cache[rel] = _dump_now(run, rel)
    return cache[rel]


def _dump_now(run: Any, rel: str) -> tuple[dict[str, str], tuple | None, dict | None]:
    """(run parameters, force-field fingerprint) of a ``.tpr`` by ``gmx dump -s`` (a reader, 60 s, its output
    capped); ({}, None) when GROMACS is unavailable or the file does not parse. The fingerprint is (the LJ
    parameter matrix, the atom types and charges of the molecule types), as printed; the third element is
    the force field by atom-type name (:func:`mdbench.audit.frozen_ff.parse_dump_topology`)."""
    from mdbench.audit.frozen_ff import parse_dump_topology  # noqa: PLC0415

    params: dict[str, str] = {}
    finger = ff = None
    path = run.fs.resolve(rel)
    gmx = shutil.which("gmx")
    if path is not None and gmx is not None and _regular(path):
        try:
            raw, rc = _bounded_output([gmx, "-quiet", "-nocopyright", "dump", "-s", str(path)], MAX_DUMP_BYTES, 60.0)
            text = raw[:MAX_DUMP_BYTES].decode("utf-8", "replace")
            head, _, topo = text.partition("topology:")
            for m in _DUMP_LINE.finditer(head):
                params.setdefault(m.group(1).replace("_", "-"), m.group(2))
            if rc == 0 and len(raw) <= MAX_DUMP_BYTES and topo:
                moltypes = topo.split("moltype (", 1)[-1] if "moltype (" in topo else topo
                finger = (tuple(_LJ.findall(topo)), tuple(_ATOM.findall(moltypes)))
                ff = parse_dump_topology(topo)
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("gmx dump of %s failed: %s", rel, exc)
    return params, finger, ff


def _equil_tpr(run: Any, case: str) -> str | None:
    from mdbench.audit.simulation import _pick  # noqa: PLC0415

    eq = _pick(run, case, "equil", ".tpr")
    npt = [e for e in eq if "npt" in e.rsplit("/", 1)[-1].lower()]
    return (npt or eq or [None])[-1]


def prefetch(run: Any, prods: dict[str, Any]) -> None:
    """Start the ``gmx dump`` of every production and equilibration run input in threads (while the
    reanalysis runs), so that :func:`amend` finds them done."""
    if shutil.which("gmx") is None:
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    rels = [r for case, pf in prods.items() for r in (getattr(pf, "tpr", None), _equil_tpr(run, case)) if r]
    cpts = [pf.cpt for pf in prods.values() if getattr(pf, "cpt", None)]
    if not rels and not cpts:
        return
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mdbench-dump")
    futures = run.fs.__dict__.setdefault("_tpr_dump_futures", {})
    for rel in dict.fromkeys(rels):
        futures[rel] = pool.submit(_dump_now, run, rel)
    cp_futures = run.fs.__dict__.setdefault("_cpt_futures", {})
    for rel in dict.fromkeys(cpts):
        cp_futures[rel] = pool.submit(_checkpoint_time_now, run, rel)
    pool.shutdown(wait=False)


_CPT_T = re.compile(r"^t = ([-+0-9.eE]+)\s*$", re.M)


def _checkpoint_time_now(run: Any, rel: str) -> float | None:
    """Simulation time [ps] a checkpoint was written at (``gmx dump -cp``), None when unreadable."""
    path = run.fs.resolve(rel)
    gmx = shutil.which("gmx")
    if path is None or gmx is None or not _regular(path):
        return None
    try:
        raw, rc = _bounded_output([gmx, "-quiet", "-nocopyright", "dump", "-cp", str(path)], 1 << 20, 60.0)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _CPT_T.search(raw[: 1 << 20].decode("utf-8", "replace"))
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def checkpoint_time(run: Any, rel: str) -> float | None:
    """:func:`_checkpoint_time_now`, or its :func:`prefetch`."""
    fut = run.fs.__dict__.get("_cpt_futures", {}).pop(rel, None)
    if fut is not None:
        try:
            return fut.result(timeout=120)
        except Exception:  # noqa: BLE001
            pass
    return _checkpoint_time_now(run, rel)


def tpr_parameters(run: Any, rel: str) -> dict[str, str]:
    """Run parameters of a ``.tpr`` (:func:`_dump`)."""
    return _dump(run, rel)[0]


def force_field_differs(run: Any, case: str, pf: Any) -> str | None:
    """Why the production run input's force field (LJ matrix, atom types, charges) differs from the
    equilibration's, if it does (the force field must not change between equilibration and production)."""
    if pf is None or pf.tpr is None:
        return None
    ref = _equil_tpr(run, case)
    if ref is None:
        return None
    a, b = _dump(run, pf.tpr)[1], _dump(run, ref)[1]
    if a is None or b is None or a == b:
        return None
    what = []
    if a[0] != b[0]:
        n = sum(x != y for x, y in zip(a[0], b[0])) + abs(len(a[0]) - len(b[0]))
        first = next((f"{y} → {x}" for x, y in zip(a[0], b[0]) if x != y), "")
        what.append(f"{n} Lennard-Jones parameter entr{'y' if n == 1 else 'ies'} ({first[:160]})")
    if a[1] != b[1]:
        what.append("atom types or charges of the molecule types")
    return (f"the production run input {pf.tpr} differs from the equilibration's {ref} in its force field: "
            + "; ".join(what))


_LOG_STEP = re.compile(r"^\s+Step\s+Time\s*\n\s+(\d+)\s+([-+0-9.eE]+)", re.M)


def production_findings(run: Any, bundle: Any, case: str, pf: Any) -> tuple[list[str], list[str]]:
    """(Sim4 problems, E5 problems): the production's thermostat target against the case, and its length
    by log, trajectory and ledger."""
    sim4, e5 = [], []
    if pf is None or pf.tpr is None or pf.t_last_ps is None:
        return sim4, e5
    cdef = bundle.cases.get(case) if bundle is not None else None
    target = getattr(cdef, "target_temperature_K", None)
    params = tpr_parameters(run, pf.tpr)
    ref = [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", params.get("ref-t", ""))]
    tc = params.get("tcoupl", "").lower()
    if isinstance(target, (int, float)) and ref and tc not in ("", "no"):
        off = [t for t in ref if abs(t - float(target)) > REF_T_TOL_K]
        if off:
            sim4.append(f"the production run input couples to {', '.join(f'{t:g}' for t in off)} K, the case's target "
                        f"is {float(target):g} K")
    if (pf.extra or {}).get("torn"):
        # a trajectory cut mid-frame is already a finding (trajectory_truncated, Sim4 = ½): its end before the
        # log's and the checkpoint's is that same fact, not a second one
        return sim4, e5
    text = run.fs.read_text(pf.log, item="Sim4") or "" if pf.log else ""
    steps = _LOG_STEP.findall(text)
    dt_x = float((pf.extra or {}).get("xtc_dt_ps") or 0.0)
    dt_e = float((pf.extra or {}).get("edr_dt_ps") or 0.0)
    tol = max(dt_x, dt_e, 1e-6) + 1e-6
    if steps:
        t_log = float(steps[-1][1])
        if abs(t_log - pf.t_last_ps) > tol:
            msg = (f"the production log's last step is at {t_log:g} ps, the trajectory ends at {pf.t_last_ps:g} ps")
            sim4.append(msg)
            e5.append(f"{case}: {msg}")
    t_cpt = checkpoint_time(run, pf.cpt) if getattr(pf, "cpt", None) else None
    if t_cpt is not None and abs(t_cpt - pf.t_last_ps) > tol:
        msg = f"the production checkpoint was written at {t_cpt:g} ps, the trajectory ends at {pf.t_last_ps:g} ps"
        sim4.append(msg)
        e5.append(f"{case}: {msg}")
    if pf.attempt is not None:
        a = run.attempts.get(pf.attempt, {})
        try:
            span = float(a.get("completed_steps", 0)) * float(a.get("dt_ps", 0))
        except (TypeError, ValueError):
            span = 0.0
        fresh = a.get("relation") not in ("continuation", "extension", "restart")
        # a segment killed and continued: the trajectory holds the whole chain, the fresh row only its part
        continued = any(b.get("parent") == pf.attempt and b.get("relation") in ("continuation", "extension",
                                                                                 "restart")
                        for b in run.attempts.values() if isinstance(b, dict))
        fresh = fresh and not continued
        if span > 0 and fresh and abs(span - (pf.t_last_ps - pf.t_first_ps)) > max(2 * tol, 0.01 * span) and \
                a.get("parent") is not None:  # (parent None: Sim4 compares these already)
            msg = (f"the ledger says attempt {pf.attempt} completed {span:g} ps, the trajectory spans "
                   f"{pf.t_last_ps - pf.t_first_ps:g} ps")
            sim4.append(msg)
            e5.append(f"{case}: {msg}")
    return sim4, e5


def unclaimed_md_files(run: Any, hidden_ns: dict[str, float] | None = None) -> list[str]:
    """MD output files (trajectories, energy files) of MD stages that no ledger attempt accounts for: more
    distinct runs (directory + file stem) in a case's equilibration/production than attempts of it in the
    ledger, the files named by an attempt's artifacts counted as that attempt's."""
    from mdbench.audit.simulation import _artifact_rel  # noqa: PLC0415

    hidden_ns = {} if hidden_ns is None else hidden_ns
    out = []
    for case in run.cases:
        named: set[str] = set()
        n_attempts: dict[str, set[str]] = {"equil": set(), "prod": set()}
        for aid, a in run.attempts.items():
            if a.get("case") != case:
                continue
            stage = canonical_stage(str(a.get("stage", ""))) or canonical_stage(str(a.get("kind", "")))
            if stage in n_attempts and a.get("relation") not in ("continuation", "extension", "restart"):
                n_attempts[stage].add(aid)
            arts = a.get("artifacts") if isinstance(a.get("artifacts"), dict) else {}
            d = run.stage_dirs.get(case, {}).get(stage or "")
            for v in arts.values():
                if isinstance(v, str):
                    rel = _artifact_rel(run, v, d)
                    if rel:
                        named.add(rel.rsplit(".", 1)[0])
        runs: dict[str, set[str]] = {"equil": set(), "prod": set()}
        files = 0
        for rel in run.fs.iter_files(f"cases/{case}") if run.fs.resolve(f"cases/{case}") is not None else []:
            files += 1
            if files > 20000:
                break
            if not rel.endswith(MD_SUFFIXES):
                continue
            stage = next((s for part in rel.split("/")[2:-1] if (s := canonical_stage(part))), None)
            if stage is None:
                stage = canonical_stage(rel.rsplit("/", 1)[-1])
            if stage in runs:
                runs[stage].add(rel.rsplit(".", 1)[0])
        for stage, stems in runs.items():
            unnamed = sorted(s for s in stems if s not in named)
            named_here = len(stems) - len(unnamed)
            allowance = max(0, len(n_attempts[stage]) - named_here)
            if len(unnamed) > allowance:
                extra = unnamed[allowance:] if allowance else unnamed
                ns = sum(_span_ns(run, s) for s in extra[:20])
                hidden_ns[case] = hidden_ns.get(case, 0.0) + ns
                out.append(f"{case}: MD output {', '.join(s + '.*' for s in extra[:4])} on disk, but the ledger "
                           f"records {len(n_attempts[stage])} {stage} attempt(s) for {len(stems)} run(s) on disk "
                           f"({ns:.4g} ns of MD not charged)")
    return out


def _span_ns(run: Any, stem: str) -> float:
    """Simulated time [ns] of an MD output by its trajectory's frame headers (0 without a readable .xtc)."""
    from mdbench.trajcheck import scan_xtc  # noqa: PLC0415

    path = run.fs.resolve(stem + ".xtc")
    if path is None or not _regular(path):
        return 0.0
    try:
        x = scan_xtc(path)
        if x.first_time_ps is None or x.last_time_ps is None:
            return 0.0
        return max(0.0, float(x.last_time_ps) - float(x.first_time_ps)) / 1000.0
    except Exception:  # noqa: BLE001 - not an xtc: nothing to count
        return 0.0


# ------------------------------------------------------------------------------------------------ report numbers
_HEADER = re.compile(r"^(#{1,6})\s+(.*)$")


_CELL_NUMBER = re.compile(r"^\s*\**\s*([-+−]?\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?)")


def _norm_name(text: str) -> str:
    """A table cell's name part, normalised (``D_li (m²/s)`` → ``d_li``; spaces and hyphens as ``_``)."""
    t = re.split(r"[(\[]", text.replace("`", "").replace("*", ""), maxsplit=1)[0].strip().lower()
    return re.sub(r"[\s-]+", "_", t)


def report_case_mismatches(run: Any, assessments: list[Any]) -> list[tuple[int, str]]:
    """(line, message) where a table row of a report.md section whose header names exactly one case gives a
    result of that case (first cell: its name) with a number (first number of the next cells) that matches no
    value of that result (powers of ten allowed: unit prefixes). In a comparison table (a header column or the
    section heading says original / revised / superseded / sensitivity …) the row is consistent when any of its
    columns gives the value."""
    from mdbench.audit.evidence import _same_up_to_unit, comparison_lines  # noqa: PLC0415

    text = run.report_md or ""
    if not text:
        return []
    per_case: dict[str, dict[str, list[float]]] = {}
    for a in assessments:
        for key, val in a.values.items():
            per_case.setdefault(a.case, {}).setdefault(re.split(r"[./]", key)[-1].lower(), []).append(val)
    out: list[tuple[int, str]] = []
    current: str | None = None
    compares = comparison_lines(text)
    for n, line in enumerate(text.splitlines()[:100_000], start=1):
        m = _HEADER.match(line)
        if m:
            named = [c for c in run.cases
                     if re.search(rf"(?<![A-Za-z0-9_]){re.escape(c)}(?![A-Za-z0-9_])", m.group(2))]
            current = named[0] if len(named) == 1 else None
            continue
        comparison = n in compares
        if current is None or not line.lstrip().startswith("|") or current not in per_case:
            continue
        cells = [c for c in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        vals = per_case[current].get(_norm_name(cells[0]))
        if not vals:
            continue
        nums = []
        for cell in cells[1:]:
            num = _CELL_NUMBER.match(cell)
            if num is None:
                continue
            try:
                nums.append((num.group(1), float(num.group(1).replace("−", "-"))))
            except ValueError:
                break
            if not comparison:
                break  # a value table: the first number is the case's value
        if not nums:
            continue
        # a comparison table (original | revised guard, a sensitivity table): the case's value is one of its columns
        if not any(_same_up_to_unit(x, v) for _s, x in nums for v in vals):
            out.append((n, f"report.md:{n} ({current}) gives {cells[0].strip()[:40]} = "
                           f"{' / '.join(s for s, _x in nums)}, results.json has "
                           f"{', '.join(f'{v:.6g}' for v in vals[:3])}"))
    return out


# ------------------------------------------------------------------------------------------------ references
_REF_KEYS = ("results_ref", "ref", "results", "results_path", "path", "file", "evidence")
_EVENT_KEYS = ("event_id", "gate_event", "producer_event", "event")
_ATTEMPT_KEYS = ("attempt", "attempt_id", "canonical_attempt", "production_attempt")


def unresolved_references(run: Any) -> list[str]:
    """Every results path, event id and attempt id named anywhere in the terminal record and observables.json
    that does not resolve (depth ≤ 8, at most 2,000 values read)."""
    from mdbench.audit.evidence import resolve_ref  # noqa: PLC0415

    event_ids = {ev.get("id") for _line, ev in run.events if isinstance(ev, dict)}
    out: list[str] = []
    budget = [2000]

    def walk(obj: Any, where: str, depth: int) -> None:
        if depth > 8 or budget[0] <= 0:
            return
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in items:
            budget[0] -= 1
            here = f"{where}.{k}"
            key = str(k).lower()
            if isinstance(v, (dict, list)):
                walk(v, here, depth + 1)
            elif isinstance(v, str) and (key in _REF_KEYS or key.endswith("_ref") or "#/" in v or
                                         v.endswith("results.json")) and not key.endswith("reason"):
                if (v.endswith(".json") or "#/" in v) and not resolve_ref(run, v)[0]:
                    out.append(f"{here} → {v!r} does not resolve")
            elif key in _EVENT_KEYS and isinstance(v, int) and not isinstance(v, bool) and v not in event_ids:
                out.append(f"{here} names event {v}, which does not exist")
            elif key in _ATTEMPT_KEYS and isinstance(v, str) and v not in run.attempts:
                out.append(f"{here} names attempt {v!r}, which is not in the ledger")

    if isinstance(run.terminal, dict):
        walk(run.terminal, "episode_terminal", 0)
    if isinstance(run.observables, dict):
        walk(run.observables, "observables", 0)
    return out[:20]


# ------------------------------------------------------------------------------------------------ hook
def precompute_case_findings(run: Any, bundle: Any, case: str, pf: Any) -> None:
    """:func:`_case_findings` of one case now, kept for :func:`amend` (the audit calls it while the reanalysis
    runs in its child process; they read only the record, the run inputs and the production's files)."""
    calls: list[tuple] = []
    _case_findings(run, bundle, case, pf, lambda *a: calls.append(a))
    run.fs.__dict__.setdefault("_case_findings", {})[case] = (pf, calls)


def _case_findings_kept(run: Any, bundle: Any, case: str, pf: Any, add: Any) -> None:
    """:func:`_case_findings` through ``add``: replayed from :func:`precompute_case_findings` where it ran on the
    same production files object, else computed now."""
    kept = run.fs.__dict__.get("_case_findings", {}).get(case)
    if kept is not None and kept[0] is pf:
        for a in kept[1]:
            add(*a)
    else:
        _case_findings(run, bundle, case, pf, add)


def _case_findings(run: Any, bundle: Any, case: str, pf: Any, add: Any) -> None:
    """The gate, force-field and production checks of one case, reported through ``add`` (see :func:`amend`)."""
    from mdbench.audit import frozen_ff  # noqa: PLC0415

    sim3, e5 = gate_findings(run, case)
    for m in sim3:  # a gate record contradicting itself is in both lists: its row lowers Sim3 and E5
        add("production_after_failed_gate" if "entered" in m else "registered_gate_fails" if "re-evaluated" in m
            else "gate_record_inconsistent", case, f"{case}: {m}", f"{REC}/events.jsonl")
    for m in e5:
        if "stage_states" in m:
            add("stage_state_contradicts_gate", case, m, f"{REC}/stage_states.json")
    ff = force_field_differs(run, case, pf)
    if ff:
        add("production_force_field_differs", case, ff, getattr(pf, "tpr", None))
    if (fb := frozen_ff.production_vs_bundle(run, bundle, case, pf)):
        add("production_force_field_not_bundle", case, fb, getattr(pf, "tpr", None))
    p4, _ = production_findings(run, bundle, case, pf)  # a length disagreement is in both lists (Sim4 and E5)
    for m in p4:
        add("production_state_point_differs" if "couples" in m else "production_length_disagrees", case, m,
            getattr(pf, "tpr", None))


def amend(run: Any, bundle: Any, prods: dict[str, Any], judgments: list[Judgment], assessments: list[Any]
          ) -> list[Finding]:
    """Apply the checks of the module docstring to ``judgments`` (in place, ratings only lowered); returns
    their findings."""
    from mdbench.audit.fabrication import lineage_artifacts  # noqa: PLC0415

    findings: list[Finding] = []
    caps: dict[tuple[str, str | None], list[tuple[float, str]]] = {}

    def add(code: str, case: str | None, msg: str, path: str | None, line: int | None = None) -> None:
        """One finding of ``code``; the items it lowers are its row's (:data:`mdbench.audit.codes.RULES`)."""
        row = rule(code)
        for item, rating in row.lowers.items():
            caps.setdefault((item, case if item in PER_CASE_ITEMS else None), []).append((rating, msg))
        findings.append(Finding(code, msg[:600], path, line, item=row.item, case=case))

    for case in run.cases:
        _case_findings_kept(run, bundle, case, prods.get(case), add)
    for m in lineage_artifacts(run, prods):
        add("lineage_artifact_missing", None, m, f"{REC}/attempts.jsonl")
    for a in assessments:  # issue 37: a delivered value no artifact supports (its finding is the group's)
        for c in getattr(a, "checks", [])[:200]:
            if c.code == "value_without_artifact":
                caps.setdefault(("E1", None), []).append((rule(c.code).lowers["E1"], c.message))
    hidden: dict[str, float] = {}
    for m in unclaimed_md_files(run, hidden):
        add("md_files_unclaimed", None, m, f"{REC}/attempts.jsonl")
    if hidden:  # their MD time counts toward the budget (seed: 100 ns per case, 300 ns in all)
        from mdbench.audit.evidence import CASE_BUDGET_NS, STUDY_BUDGET_NS, ledger_consumption  # noqa: PLC0415

        cons = ledger_consumption(run)
        for case, ns in hidden.items():
            total = cons.per_case_ns.get(case, 0.0) + ns
            if total > CASE_BUDGET_NS + 1e-9:
                m = (f"{case}: {total:.4g} ns of MD with the unclaimed files exceeds the {CASE_BUDGET_NS:g} ns case "
                     "budget")
                add("budget_exceeded", None, m, f"{REC}/attempts.jsonl")
        if cons.total_ns + sum(hidden.values()) > STUDY_BUDGET_NS + 1e-9:
            total_ns = cons.total_ns + sum(hidden.values())
            m = f"{total_ns:.4g} ns of MD with the unclaimed files exceeds {STUDY_BUDGET_NS:g} ns"
            add("budget_exceeded", None, m, f"{REC}/attempts.jsonl")
    for line, m in report_case_mismatches(run, assessments)[:5]:
        add("report_number_differs", None, m, "report.md", line)
    for m in unresolved_references(run):  # one finding per reference: its JSON pointer is the location
        where = m.split(" ", 1)[0]
        doc, _, ptr = where.partition(".")
        rel = f"{REC}/episode_terminal.json" if doc == "episode_terminal" else f"{REC}/observables.json"
        add("terminal_reference_unresolved", None, m, f"{rel}#/{ptr.replace('.', '/')}")
    o5 = next((j for j in judgments if j.item == "O5" and j.case is None), None)
    if o5 is not None and o5.rating is not None and o5.rating < 1 and run.claimed_outcome() is not None:
        # a claim that the evidence contradicts (no claim at all is O5's own matter, not an inconsistency)
        add("claim_contradicted", None, f"the terminal claim is contradicted by the evidence (O5: {o5.reason[:200]})",
            f"{REC}/episode_terminal.json")
    for i, j in enumerate(judgments):
        got = caps.get((j.item, j.case))
        if got and j.observable is None:
            n = len(got)
            rating = min(r for r, _ in got)
            if j.item == "E5" and n > 1:
                rating = 0.0  # two or more contradictions in the record
            judgments[i] = cap(j, rating, "; ".join(m for _, m in got[:5]))
    return deduplicate_findings(findings)


def deduplicate_findings(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        k = (f.code, f.message, f.item)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return out
