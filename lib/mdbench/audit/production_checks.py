"""The production as simulated (Sim1, Sim4, E5): the production ``.tpr``'s force field against the
equilibration's (``production_force_field_differs``), its thermostat target against the case's
(``production_state_point_differs``), and the log's last step, the checkpoint, the trajectory's end and the
ledger's completed steps against each other (``production_length_disagrees``)."""

from __future__ import annotations

import re
from typing import Any

from mdbench.audit.gmx_dump import REF_T_TOL_K, _dump, _equil_tpr, checkpoint_time, tpr_parameters
from mdbench.audit.runread import RunData


def force_field_differs(run: RunData, case: str, pf: Any) -> str | None:
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


def production_findings(run: RunData, bundle: Any, case: str, pf: Any) -> tuple[list[str], list[str]]:
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
