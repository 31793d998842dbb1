"""MD files on disk that no ledger row claims (``md_files_unclaimed``, E1 ≤ ½, E5 ≤ ½): hidden budget use,
with their simulated time from the xtc frame headers."""

from __future__ import annotations


from mdbench.audit.gmx_dump import _regular
from mdbench.audit.runread import RunData, canonical_stage
from mdbench.audit.simulation import _artifact_rel

MD_SUFFIXES = (".xtc", ".trr", ".edr")


def unclaimed_md_files(run: RunData, hidden_ns: dict[str, float] | None = None) -> list[str]:
    """MD output files (trajectories, energy files) of MD stages that no ledger attempt accounts for: more
    distinct runs (directory + file stem) in a case's equilibration/production than attempts of it in the
    ledger, the files named by an attempt's artifacts counted as that attempt's."""
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


def _span_ns(run: RunData, stem: str) -> float:
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
