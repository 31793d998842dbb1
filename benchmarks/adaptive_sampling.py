"""Fixed-length production vs production until earned, under the same MD cap; and how well a first segment
projects the half-widths a longer production obtains.

Two measurements, each starting from a finished fixed-length study (``mdbench study run --preset P --out BASE``,
production and analysis done); BASE is copied, never changed.

``compare BASE --budget-ns N``
    Arm *fixed*: every case's production extended evenly so that the study's MD reaches the cap N.
    Arm *earned*: ``--until earned --budget-ns N`` (:func:`mdbench.engine.adaptive.run_until_earned`).
    Per arm and observable: final state, 95 % half-width, production ns per case; MD ns in all and wall time.
    Goal (issue 46): D of every species C in all three cases, or a recorded projection that says why not;
    no ns spent on an F result.

``accuracy BASE [BASE2 …] --factor K``
    For D of each species and σ_NE (and σ, η): the half-width projected from the first production T by the
    projection's rule (hw·(T/KT)^½; for σ, σ_NE, fitted over lags that grow with the block, the relative
    half-width carried over), against the half-width obtained after extending the same run to KT.
    Prints the ratio obtained/projected per result and its distribution; target: within a factor 1.5 for D and
    σ_NE.

Measured: docs/performance.md, "Production until earned (issue 46)": with the rule before (own four-block
hw x (T/T')^1/2) D was within a factor 1.5 in 30/63 results (micro seed 2026 extended and reanalysed, micro
seeds 101-104 and tiny by ``prefix``), with the pooled D half-width (:func:`mdbench.analysis.projection.
pooled_half_width`) in 35/63 (the four-block scatter of the obtained half-width alone caps it near 64 %).
sigma_NE (``prefix`` on seven tiny productions of 0.6-2.14 ns, first 40-500 ps, 13 rows, 2026-12-06): the
length-independent relative half-width, median 1.31 and 10/13 within a factor 1.5, against median 1.48 and
6/13 for hw x (T/T')^1/2 (docs/performance.md, "σ_NE and σ").

``prefix DIR [DIR …] --first-ps T [T2 …] --factor K``
    The same ratio from prefixes of long productions (folders with prod.tpr and prod.xtc): the registered D
    estimator on the first T ps and on all K T ps of each; no MD and no full analysis (see
    :func:`prefix_accuracy`).

``compare`` on the same micro base with a 0.73 ns cap (under load): fixed 0.730 ns MD, 252 s, 70 C / 87 SI
results; earned 0.621 ns MD, 213 s, 75 C / 82 SI (DE extended three times to 0.182 ns, LHCE once to 0.088 ns,
HCE stopped at once: its D projected at 1.45-4.87 ns, beyond the cap). No D became C in either arm at micro; every
stop recorded the results out of reach with their projected ns; no extension targeted an F or M result.

``compare`` on a tiny ``make demo`` run, 4 ns cap, idle machine (docs/performance.md, "fixed vs --until earned on
the tiny study"): fixed 4.002 ns, 1,395 s, 74 C / 83 SI; earned 3.891 ns, 1,370 s, 64 C / 93 SI (DE to 2.14 ns,
LHCE to 0.6 ns, HCE stopped at once). D stays SI everywhere (diffusive window: DE Li+ and FSI- projected at
4-7 ns, the rest beyond the seed's budget); 1 of 4 targeted results earned; DE's structural results drift over
2 ns, so their 100 ps blocks had under-stated the uncertainty. Rerun with the final rules (correlation time,
history, cheapest first, lag-fraction precision; 2026-12-06, ``--arm``): fixed 4.002 ns, 1,660 s, 67 C / 90 SI;
earned 3.205 ns, 959 s, 70 C / 87 SI (LHCE to 0.628 ns, DE to 1.427 ns, then every case stopped with 0.795 ns
of the cap left: nothing projected earned within it).

Examples (the lead's tiny runs; micro is what a loaded 2-core machine affords)::

    mdbench study run --preset tiny --out /tmp/tiny_base --seed 11
    python benchmarks/adaptive_sampling.py compare /tmp/tiny_base --budget-ns 4 --preset tiny --work /tmp/cmp
    python benchmarks/adaptive_sampling.py accuracy /tmp/tiny_base /tmp/tiny_base2 --factor 4 --preset tiny
    python benchmarks/adaptive_sampling.py prefix /tmp/tiny_base/cases/*/prod --first-ps 100 --factor 4
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

CASES = ["DE", "HCE", "LHCE"]
ACCURACY_RESULTS = ("self_diffusion/", "conductivity/sigma_NE", "conductivity/sigma", "viscosity")


def _copy(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest, symlinks=True)
    return dest


def _results(run: Path, case: str) -> dict:
    from mdbench.analysis.study_state import load_results

    return load_results(run, case).get("observables") or {}


def _hw(o: dict) -> float | None:
    hw = (o.get("uncertainty") or {}).get("half_width_95") if isinstance(o.get("uncertainty"), dict) else None
    return float(hw) if isinstance(hw, (int, float)) and math.isfinite(hw) else None


def _extend(run: Path, case: str, total_ps: float, preset: str, threads: int = 1) -> str:
    from mdbench.analysis.pipeline import load_or_analyze_case
    from mdbench.engine.stages import produce

    report = produce(run, case, preset=preset, engine="cli", threads=threads, production_ps=total_ps)
    if report.state == "valid":
        load_or_analyze_case(run, case, preset=preset, force=True)
    return report.state


def _summary(run: Path, wall_s: float) -> dict:
    from mdbench.analysis.study_state import production_ns
    from mdbench.record import RunRecord

    rec = RunRecord(run)
    out = {"wall_s": wall_s, "md_ns": rec.committed_ns(), "cases": {}}
    for case in CASES:
        obs = {n: {"state": o.get("state"), "half_width_95": _hw(o)} for n, o in _results(run, case).items()}
        out["cases"][case] = {"production_ns": production_ns(rec, case), "observables": obs}
    return out


def compare(base: Path, budget_ns: float, preset: str, work: Path, threads: int = 0,
            arms_run: tuple[str, ...] = ("fixed", "earned")) -> dict:
    """Both arms (or those in ``arms_run``) from copies of ``base`` under the MD cap ``budget_ns``, the cases
    one after the other in both, each mdrun at ``threads`` (0: the study's default, the fair share of the
    machine's cores)."""
    from mdbench.analysis.study_state import production_ns
    from mdbench.engine.adaptive import run_until_earned
    from mdbench.record import RunRecord

    arms: dict[str, dict] = {}
    if "fixed" in arms_run:
        fixed = _copy(base, work / "fixed")
        t0 = time.perf_counter()
        rec = RunRecord(fixed)
        share = max(0.0, budget_ns - rec.committed_ns()) / len(CASES)
        for case in CASES:
            _extend(fixed, case, (production_ns(rec, case) + share) * 1000.0, preset, threads)
        arms["fixed"] = _summary(fixed, time.perf_counter() - t0)
    if "earned" not in arms_run:
        return arms
    earned = _copy(base, work / "earned")
    t0 = time.perf_counter()
    decisions = run_until_earned(earned, CASES, preset=preset, engine="cli", threads=threads, budget_ns=budget_ns,
                                 echo=print)
    arms["earned"] = _summary(earned, time.perf_counter() - t0)
    arms["earned"]["decisions"] = [{k: d[k] for k in ("case", "action", "target_ns", "targets", "never_extended",
                                                      "reason")} for d in decisions]
    return arms


def _projected(name: str, hw0: float, value0: float | None, value1: float | None, factor: float,
               pooled: tuple[float, int] | None) -> float:
    """The half-width the projection rule expects after a ``factor``-fold extension: (pooled or own) hw x
    factor^-gamma (:func:`mdbench.analysis.projection.half_width_exponent`); for gamma = 0 (lags that grow with
    the block) the relative half-width carries over, at the value obtained."""
    from mdbench.analysis.projection import half_width_exponent

    gamma = half_width_exponent(name)
    if gamma == 0.0 and value0 and value1 is not None:
        return hw0 / abs(value0) * abs(value1)
    return (pooled[0] if pooled else hw0) * factor ** -gamma


def _row(run: str, case: str, name: str, first: dict, hw1: float, value1: float | None, factor: float,
         pooled: tuple[float, int] | None, **extra) -> dict:
    hw0, value0 = _hw(first), first.get("value")
    projected = _projected(name, hw0, value0, value1, factor, pooled)
    return {"run": run, "case": case, "result": name, "hw_first": hw0, "value_first": value0,
            "hw_projected": projected, "hw_obtained": hw1, "value_obtained": value1, "ratio": hw1 / projected,
            "ratio_sqrt": hw1 / (hw0 / math.sqrt(factor)), **extra}


def accuracy(bases: list[Path], factor: float, preset: str, work: Path) -> list[dict]:
    """Projected vs obtained half-width after extending each case of each base run ``factor``-fold."""
    from mdbench.analysis.projection import pooled_half_width
    from mdbench.analysis.study_state import load_results, production_ns
    from mdbench.record import RunRecord

    rows = []
    for i, base in enumerate(bases):
        run = _copy(base, work / f"acc{i}")
        rec = RunRecord(run)
        for case in CASES:
            doc = load_results(run, case)
            before = {n: o for n, o in (doc.get("observables") or {}).items() if n.startswith(ACCURACY_RESULTS)}
            t_ns = production_ns(rec, case)
            if _extend(run, case, t_ns * factor * 1000.0, preset) != "valid":
                continue
            after = _results(run, case)
            for name, o in before.items():
                hw0, hw1 = _hw(o), _hw(after.get(name) or {})
                if hw0 and hw1:
                    rows.append(_row(str(base), case, name, o, hw1, (after.get(name) or {}).get("value"), factor,
                                     pooled_half_width(doc, name)))
    return rows


def prefix_accuracy(trajectories: list[Path], first_ps: float | list[float], factor: float) -> list[dict]:
    """Projected vs obtained half-widths of D (each species), sigma_NE and sigma from prefixes of long
    productions.

    Each path is a folder with ``prod.tpr`` and ``prod.xtc`` (a case's ``prod/`` or a plain mdrun folder). An
    extension continues the same trajectory, so the first ``first_ps`` of a trajectory of ``factor`` x that
    length *is* the first segment: the registered estimators (:func:`mdbench.analysis.diffusion.self_diffusion`
    for D, :func:`mdbench.analysis.onsager.onsager_transport` for sigma_NE and sigma, registered settings,
    guard 0) on the prefix give the first half-width and the projection, on the whole trajectory the obtained
    one — without rerunning MD or the full analysis. Each row has the ratio obtained/projected of two rules:
    ``ratio_sqrt`` (the result's own four-block hw x (T/T')^1/2, the rule before) and ``ratio`` (the
    projection's rule now: D pooled over the case's species, :func:`mdbench.analysis.projection.
    pooled_half_width`, x (T/T')^1/2; sigma_NE and sigma, fitted over lags that grow with the block, their
    relative half-width unchanged). ``first_ps`` may list several first lengths (each one row set).
    """
    import numpy as np

    from mdbench.analysis.diffusion import self_diffusion
    from mdbench.analysis.observables import SIGMA, SIGMA_NE
    from mdbench.analysis.onsager import onsager_transport
    from mdbench.analysis.projection import pooled_half_width
    from mdbench.analysis.reduce.onepass import reduce_files
    from mdbench.analysis.settings import AnalysisSettings

    s = AnalysisSettings()
    rows = []
    seen: set[tuple] = set()
    for folder in trajectories:
        rd = reduce_files(folder / "prod.tpr", folder / "prod.xtc")
        case = folder.parent.name if folder.name == "prod" else folder.name
        t = rd.time_ps - rd.time_ps[0]
        counts = {sp: int(np.sum(rd.species_mask(sp))) for sp in rd.species}
        charges = {sp: float(rd.species_charge_e[sp]) for sp in rd.species}

        def estimate(length: float) -> tuple[dict, object]:
            sl = t <= length + 1e-6
            d = {sp: self_diffusion(rd.species_com_nm(sp)[sl], rd.time_ps[sl], species=sp,
                                    system_com_nm=rd.system_com_nm[sl], guard_ps=0.0, n_blocks=s.n_blocks,
                                    beta_range=s.diffusion_beta_range, min_window_decades=s.diffusion_min_decades,
                                    max_lag_fraction=s.diffusion_max_lag_fraction,
                                    max_relative_half_width=s.diffusion_max_rel_half_width,
                                    trend_alpha=s.block_trend_alpha) for sp in rd.species}
            o = onsager_transport({sp: rd.species_com_nm(sp)[sl] for sp in rd.species}, charges, rd.time_ps[sl],
                                  rd.volume_nm3[sl], s.temperature_K or 298.15, system_com_nm=rd.system_com_nm[sl],
                                  guard_ps=0.0, n_blocks=s.n_blocks, fit_window_fraction=s.onsager_fit_window_fraction,
                                  beta_range=s.onsager_beta_range,
                                  self_msd_nm2={sp: [r.msd_nm2, *r.msd_blocks_nm2] for sp, r in d.items()
                                                if not r.failures})
            obs = {f"self_diffusion/{sp}": {"value": r.D.whole, "uncertainty": {"half_width_95": r.D.half_width_95}}
                   for sp, r in d.items()}
            for name, est in ((SIGMA_NE, o.sigma_NE), (SIGMA, o.sigma)):
                obs[name] = {"value": est.whole, "uncertainty": {"half_width_95": est.half_width_95}}
            return obs, o

        for first_len in (first_ps if isinstance(first_ps, list) else [first_ps]):
            if t[-1] < first_len * factor - 1e-6:
                print(f"{folder}: {t[-1]:.0f} ps < {first_len * factor:.0f} ps, skipped", file=sys.stderr)
                continue
            (obs0, o0), (obs1, o1) = estimate(first_len), estimate(first_len * factor)
            key = (case, first_len, round(o0.sigma_NE.whole, 12), round(o1.sigma_NE.whole, 12))
            if key in seen:  # the same trajectory twice (two copies of one run): one row set
                continue
            seen.add(key)
            first = {"system": {"n_molecules": counts, "charges_e": charges}, "windows": {"n_blocks": s.n_blocks},
                     "observables": obs0}
            for name, o in obs0.items():
                hw1 = _hw(obs1[name])
                if _hw(o) and hw1:
                    rows.append(_row(str(folder), case, name, o, hw1, obs1[name]["value"], factor,
                                     pooled_half_width(first, name), first_ps=first_len,
                                     n_molecules=counts.get(name.rsplit("/", 1)[-1]),
                                     charge_msd_beta=[o0.charge_msd_beta, o1.charge_msd_beta]))
    return rows


def _print_accuracy(rows: list[dict]) -> None:
    print(f"{'run':>10s} {'case':5s} {'result':34s} {'projected':>10s} {'obtained':>10s} ratio")
    for r in rows:
        print(f"{Path(r['run']).name[-10:]:>10s} {r['case']:5s} {r['result']:34s} {r['hw_projected']:10.3g} "
              f"{r['hw_obtained']:10.3g} {r['ratio']:.2f}")
    for key, rule in (("ratio_sqrt", "own hw (T/T')^1/2"), ("ratio", "the projection's rule")):
        for label, prefix in (("D", "self_diffusion/"), ("sigma_NE", "conductivity/sigma_NE"),
                              ("sigma", "conductivity/sigma")):
            ratios = [r[key] for r in rows if (r["result"] == prefix if "sigma" in prefix else
                                               r["result"].startswith(prefix)) and key in r]
            if ratios:
                within = sum(1 / 1.5 <= x <= 1.5 for x in ratios)
                print(f"{rule:32s} {label:8s}: median ratio {statistics.median(ratios):.2f}, range "
                      f"{min(ratios):.2f}-{max(ratios):.2f}, {within}/{len(ratios)} within a factor 1.5")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("base", type=Path)
    c.add_argument("--budget-ns", type=float, required=True)
    c.add_argument("--threads", type=int, default=0, help="threads per mdrun (0: the fair share, the study's default)")
    c.add_argument("--arm", choices=("both", "fixed", "earned"), default="both", help="run one arm only")
    a = sub.add_parser("accuracy")
    a.add_argument("bases", type=Path, nargs="+")
    a.add_argument("--factor", type=float, default=4.0)
    pre = sub.add_parser("prefix")
    pre.add_argument("trajectories", type=Path, nargs="+", help="folders with prod.tpr and prod.xtc")
    pre.add_argument("--first-ps", type=float, nargs="+", default=[40.0])
    pre.add_argument("--factor", type=float, default=4.0)
    pre.add_argument("--json", type=Path, default=None)
    for s in (c, a):
        s.add_argument("--preset", default="micro")
        s.add_argument("--json", type=Path, default=None, help="also write the numbers here")
        s.add_argument("--work", type=Path, default=None, help="keep the arms' run folders here (default: removed)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mdbench-adaptive-") as scratch:
        tmp = getattr(args, "work", None) or Path(scratch)
        Path(tmp).mkdir(parents=True, exist_ok=True)
        if args.cmd == "compare":
            out = compare(args.base, args.budget_ns, args.preset, Path(tmp), args.threads,
                          ("fixed", "earned") if args.arm == "both" else (args.arm,))
            for arm, s in out.items():
                d_states = {c: {n: o["state"] for n, o in v["observables"].items() if n.startswith("self_diffusion/")}
                            for c, v in s["cases"].items()}
                print(f"{arm}: MD {s['md_ns']:.3f} ns, wall {s['wall_s']:.0f} s, production ns "
                      + ", ".join(f"{c} {v['production_ns']:.3f}" for c, v in s["cases"].items()))
                print(f"  D states: {d_states}")
        elif args.cmd == "prefix":
            out = prefix_accuracy(args.trajectories, args.first_ps, args.factor)
            _print_accuracy(out)
        else:
            out = accuracy(args.bases, args.factor, args.preset, Path(tmp))
            _print_accuracy(out)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
