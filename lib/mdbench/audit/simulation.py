"""Simulation items Sim1–Sim4, checked deterministically from the GROMACS files of each case.

Sim1 reads the ``.tpr`` (MDAnalysis TPR parser; nothing is executed) and compares molecule counts,
ordering and charges with the bundle's case definition and force-field files by sha256. Sim2 parses the
minimisation log. Sim3 recomputes temperature and density statistics from the equilibration ``.edr``
(pyedr). Sim4 checks that one canonical production branch exists and that its trajectory, run input,
energy file, checkpoint and log are readable and mutually consistent (streamed with the XTC reader, no
offset cache written into the run directory).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mdbench.analysis.blocks import T_975_DOF3
from mdbench.audit.bundle import Bundle, CaseDefinition
from mdbench.audit.model import Evidence, Judgment
from mdbench.audit.runread import RunData, canonical_stage
from mdbench.trajcheck import scan_xtc

log = logging.getLogger(__name__)

#: Largest |net charge| of the whole system accepted as neutral [e].
NET_CHARGE_TOL_E = 1e-3
#: Largest |<T> - T_target| accepted over the last half of equilibration [K].
TEMPERATURE_TOL_K = 5.0
#: Largest relative change of mean density between the two quarters ending equilibration (or the block
#: scatter t·s_b of four block means of the last half, whichever is larger — small systems fluctuate).
DENSITY_DRIFT_TOL = 0.02
#: Fmax below which a non-converged minimisation still counts as overlap-free [kJ mol^-1 nm^-1].
FMAX_OVERLAP_FREE = 1000.0


#: Frames of the production trajectory kept for the integrity checks (:mod:`mdbench.audit.trajectory_integrity`).
#: Centres every frame pair is screened on before the candidates are compared on all.
SCREEN_CENTRES = 8
#: Centres (or atoms) compared.
N_COMPARED = 256
#: Largest number of coordinates kept for the comparison (a hostile trajectory of millions of frames).
MAX_SAMPLE_VALUES = 12_000_000


def sampled_atoms(n: int, n_frames: int = 1) -> np.ndarray:
    """Indices of the evenly spaced subset of ``n`` atoms or centres the frames are compared on: at most
    :data:`N_COMPARED`, fewer for a very long trajectory (:data:`MAX_SAMPLE_VALUES` coordinates kept in all)."""
    n_keep = max(SCREEN_CENTRES, min(N_COMPARED, int(MAX_SAMPLE_VALUES / (3 * max(1, n_frames)))))
    return np.linspace(0, n - 1, min(n_keep, n)).astype(int)


@dataclass
class ProdFiles:
    """The canonical production files of one case and what Sim4 learned about them."""

    tpr: str | None = None
    xtc: str | None = None
    edr: str | None = None
    log: str | None = None
    cpt: str | None = None
    n_frames: int = 0
    t_first_ps: float | None = None
    t_last_ps: float | None = None
    readable: bool = False
    attempt: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: (positions of a subset of atoms (F, n, 3) [nm], box edges (F, 3) [nm]) kept while decoding (issue 45)
    frame_sample: Any = None


def _artifact_rel(run: RunData, value: str, stage_dir: str | None) -> str | None:
    """A ledger artifact path (relative, or absolute inside the run directory) as a run-relative path."""
    p = Path(value)
    if p.is_absolute():
        try:
            return p.relative_to(run.fs.root).as_posix()
        except ValueError:
            try:
                return Path(os.path.realpath(p)).relative_to(run.fs.root).as_posix()
            except (ValueError, OSError):
                return f"{stage_dir}/{p.name}" if stage_dir else None  # run directory moved: same file name
    if value.startswith("cases/") or value.startswith("analysis/"):
        return value
    return f"{stage_dir}/{value}" if stage_dir else None


def _pick(run: RunData, case: str, stage: str, ext: str, preferred: dict[str, str] | None = None,
          stem: str | None = None) -> list[str]:
    """Candidate files of a stage with extension ``ext``: the ledger's artifact first, then ``<stem><ext>``,
    then every matching file (GROMACS console/command captures excluded), sorted by name."""
    d = run.stage_dirs.get(case, {}).get(stage)
    if preferred:
        for v in preferred.values():
            if isinstance(v, str) and v.endswith(ext):
                rel = _artifact_rel(run, v, d)
                if rel is not None and run.fs.resolve(rel) is not None:
                    return [rel]
    if not d:
        return []
    cands = [c for c in run.fs.glob(d, f"*{ext}") if ".console." not in c and ".cmd." not in c]
    if stem is not None:
        exact = [c for c in cands if c.rsplit("/", 1)[-1] == stem + ext]
        if exact:
            return exact
    return cands


def _stage_attempt_artifacts(run: RunData, case: str, stage: str) -> dict[str, str] | None:
    """Artifacts of the last completed ledger attempt of a stage (None when the ledger names none)."""
    done = [a for a in run.attempts.values() if a.get("case") == case and a.get("status") == "completed"
            and (canonical_stage(str(a.get("stage", ""))) == stage or canonical_stage(str(a.get("kind", ""))) == stage)
            and isinstance(a.get("artifacts"), dict) and a["artifacts"]]
    return done[-1]["artifacts"] if done else None


def tpr_universe(run: RunData, rel: str) -> Any:
    """A topology-only MDAnalysis Universe of a run input (the TPR parser; no coordinates read), parsed once
    per audit and file (Sim1 and Sim4 read the same production ``.tpr``)."""
    cache = run.fs.__dict__.setdefault("_tpr_cache", {})
    if rel not in cache:
        from mdbench.analysis.reduce.topology import tpr_universe as _universe  # noqa: PLC0415

        cache[rel] = _universe(run.fs.resolve(rel))  # the reanalysis reuses the parse (one per process)
    return cache[rel]


def species_charges(u: Any) -> dict[str, float]:
    """Net charge per molecule [e] of each species (residue name of a molecule's first atom) of a topology:
    the charges every transport definition of the run must use, formed as the analysis forms them
    (:func:`mdbench.analysis.reduce.model.species_charges_e`, registered neutral tolerance)."""
    from mdbench.analysis.reduce.model import species_charges_e  # noqa: PLC0415
    from mdbench.analysis.settings import AnalysisSettings  # noqa: PLC0415

    try:
        molnums = np.asarray(u.atoms.molnums)
        charges = np.asarray(u.atoms.charges, dtype=np.float64)
        resnames = np.asarray(u.atoms.resnames)
    except Exception:  # noqa: BLE001 - a topology without charges: nothing to compare
        return {}
    first = np.r_[0, np.flatnonzero(np.diff(molnums)) + 1]
    mol_charge = np.add.reduceat(charges, first)
    mol_species = resnames[first].astype(str)
    species = list(dict.fromkeys(mol_species.tolist()))
    return species_charges_e(mol_species, mol_charge, species, AnalysisSettings().neutral_charge_tolerance_e)


def _moltype_blocks(u: Any) -> list[tuple[str, int]]:
    """Consecutive (moltype, molecule count) blocks of a universe in topology order."""
    molnums = u.atoms.molnums
    moltypes = u.atoms.moltypes
    first = np.r_[0, np.flatnonzero(np.diff(molnums)) + 1]
    blocks: list[tuple[str, int]] = []
    for i in first:
        name = str(moltypes[i])
        if blocks and blocks[-1][0] == name:
            blocks[-1] = (name, blocks[-1][1] + 1)
        else:
            blocks.append((name, 1))
    return blocks


def check_setup(run: RunData, bundle: Bundle, case: str) -> Judgment:
    """Sim1: counts, ordering, charges and force-field identity against the frozen inputs."""
    tprs = (_pick(run, case, "prod", ".tpr") or _pick(run, case, "equil", ".tpr")
            or _pick(run, case, "em", ".tpr") or _pick(run, case, "setup", ".tpr"))
    if not tprs:
        return Judgment("Sim1", 0.0, "no .tpr file for this case; composition cannot be checked", case)
    tpr = tprs[-1]
    ev = [Evidence(tpr, note="molecule blocks and charges read from the run input")]
    try:
        u = tpr_universe(run, tpr)
        blocks = _moltype_blocks(u)
        charges = u.atoms.charges.astype(np.float64)
        net = float(charges.sum())
    except Exception as exc:  # noqa: BLE001 - any parser failure is a finding, never a crash
        run.fs.add("unreadable_tpr", f"cannot read run input: {type(exc).__name__}: {exc}"[:300], tpr,
                   item="Sim1", case=case)
        return Judgment("Sim1", 0.0, "run input (.tpr) unreadable", case, evidence=ev)
    problems: list[str] = []
    partial: list[str] = []
    if abs(net) > NET_CHARGE_TOL_E:
        problems.append(f"net charge {net:+.4f} e is not neutral")
    cdef: CaseDefinition | None = bundle.cases.get(case)
    if cdef is None:
        partial.append("no case definition in the bundle; counts checked for neutrality only")
    else:
        ev.append(Evidence(f"bundle:{cdef.source}", key="molecules"))
        want = [(n.upper(), c) for n, c in cdef.molecules if c > 0]
        got = [(n.upper(), c) for n, c in blocks]
        if sorted(want) != sorted(got):
            problems.append(f"molecule counts {dict(got)} differ from the bundle {dict(want)}")
        elif want != got:
            problems.append(f"molecule ordering {[n for n, _ in got]} differs from the bundle {[n for n, _ in want]}")
        for mol, q in cdef.charges.items():
            sel = u.atoms[np.char.upper(u.atoms.moltypes.astype(str)) == mol.upper()]
            if len(sel) == 0:
                continue
            per_mol = float(sel.charges.astype(np.float64).sum()) / max(1, len(np.unique(sel.molnums)))
            if abs(per_mol - q) > NET_CHARGE_TOL_E:
                problems.append(f"{mol} net charge {per_mol:+.4f} e, bundle says {q:+.4f} e")
    # force-field identity by checksum
    setup_dir = run.stage_dirs.get(case, {}).get("setup")
    ff_files = run.fs.glob(setup_dir, "*.itp") if setup_dir else []
    matched = 0
    for f in ff_files:
        name = f.rsplit("/", 1)[-1]
        if name in bundle.ff_sha256:
            digest = run.fs.sha256(f, item="Sim1")
            if digest != bundle.ff_sha256[name]:
                problems.append(f"force-field file {name} differs from the bundle (sha256)")
                ev.append(Evidence(f, note="sha256 differs from bundle"))
            else:
                matched += 1
    if matched == 0 and not problems:
        partial.append("force-field identity not verifiable (no bundle force-field file found in setup/)")
    if problems:
        return Judgment("Sim1", 0.0, "; ".join(problems), case, evidence=ev)
    if partial:
        return Judgment("Sim1", 0.5, "; ".join(partial), case, evidence=ev)
    return Judgment("Sim1", 1.0, f"composition {blocks}, neutral ({net:+.1e} e), {matched} force-field file(s) "
                    "identical to the bundle", case, evidence=ev)


_CONV = re.compile(r"converged to Fmax\s*<\s*([-+0-9.eE]+)\s+in\s+(\d+)\s+steps")
_NOCONV = re.compile(r"(did not converge to Fmax\s*<\s*([-+0-9.eE]+)|converged to machine precision)")
_FMAX = re.compile(r"Maximum force\s*=\s*([-+0-9.eEnaNinf]+)")
_EPOT = re.compile(r"Potential Energy\s*=\s*([-+0-9.eEnaNinf]+)")


def check_minimization(run: RunData, case: str) -> Judgment:
    """Sim2: the minimisation log shows the declared criterion met and no abnormal forces."""
    logs = _pick(run, case, "em", ".log")
    if not logs:
        return Judgment("Sim2", 0.0, "no minimisation log retained", case)
    rel = logs[-1]
    text = run.fs.read_text(rel, item="Sim2") or ""
    fmax = _FMAX.findall(text)
    epot = _EPOT.findall(text)
    conv = _CONV.search(text)
    line = text[: conv.start()].count("\n") + 1 if conv else None
    ev = [Evidence(rel, line=line, key="Maximum force")]
    try:
        f = float(fmax[-1]) if fmax else math.nan
        e = float(epot[-1]) if epot else math.nan
    except ValueError:
        f = e = math.nan
    if not (math.isfinite(f) and math.isfinite(e)):
        return Judgment("Sim2", 0.0, "minimisation log lacks a finite final Fmax / potential energy", case, evidence=ev)
    if conv:
        return Judgment("Sim2", 1.0, f"converged to Fmax < {conv.group(1)} in {conv.group(2)} steps "
                        f"(Fmax {f:.3g} kJ/mol/nm, Epot {e:.6g} kJ/mol)", case, evidence=ev)
    if f < FMAX_OVERLAP_FREE:
        return Judgment("Sim2", 0.5, f"criterion not met as declared but Fmax {f:.3g} kJ/mol/nm shows no severe "
                        "overlap", case, evidence=ev)
    return Judgment("Sim2", 0.0, f"minimisation did not converge (Fmax {f:.3g} kJ/mol/nm)", case, evidence=ev)


def _edr(run: RunData, rel: str, item: str, case: str) -> dict[str, np.ndarray] | None:
    """Every term of an energy file (``Time`` included) via the analysis room's reader, which checks the
    header before pyedr trusts it (garbage cannot make it allocate unbounded memory)."""
    try:
        from mdbench.analysis.thermo import read_energy_file  # noqa: PLC0415

        series = read_energy_file(str(run.fs.resolve(rel)))
        return {"Time": series.time_ps, **series.terms}
    except Exception as exc:  # noqa: BLE001
        run.fs.add("unreadable_edr", f"cannot read energy file: {type(exc).__name__}: {exc}"[:300], rel,
                   item=item, case=case)
        return None


def _standard_error(x: np.ndarray) -> float:
    """Standard error of the mean of a correlated series, :math:`s\\sqrt{g/n}` with the statistical
    inefficiency :math:`g` from pymbar (block scatter of four blocks if pymbar cannot estimate it)."""
    x = np.asarray(x, dtype=np.float64)
    try:
        import contextlib  # noqa: PLC0415
        import io  # noqa: PLC0415

        for name in ("pymbar", "pymbar.timeseries", "pymbar.mbar_solvers"):
            logging.getLogger(name).setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from pymbar import timeseries  # noqa: PLC0415

            g = float(timeseries.statistical_inefficiency(x))
        return float(x.std(ddof=1) * np.sqrt(max(g, 1.0) / x.size))
    except Exception:  # noqa: BLE001 - constant or too-short series
        blocks = np.array([b.mean() for b in np.array_split(x, 4)])
        return float(blocks.std(ddof=1) / 2.0)


def check_equilibration(run: RunData, bundle: Bundle, case: str) -> Judgment:
    """Sim3: temperature and density recomputed from the last equilibration energy file.

    Over the last half of the file: :math:`|\\langle T\\rangle - T_0| \\le \\max(5\\,K,\\ 4\\,\\mathrm{SE})` with SE the
    standard error of the mean corrected for correlation (small systems fluctuate); if a density series
    exists, the means of its last two quarters differ by at most 2 %; every value finite.
    """
    arts = _stage_attempt_artifacts(run, case, "equil")
    edrs = _pick(run, case, "equil", ".edr", arts)
    if len(edrs) > 1:
        npt = [e for e in edrs if "npt" in e.rsplit("/", 1)[-1].lower()]
        edrs = npt or edrs
    if not edrs:
        return Judgment("Sim3", 0.0, "no equilibration energy file retained", case)
    rel = edrs[-1]
    data = _edr(run, rel, "Sim3", case)
    ev = [Evidence(rel, key="Temperature")]
    if data is None or "Temperature" not in data or len(data["Temperature"]) < 4:
        return Judgment("Sim3", 0.0, "equilibration energy file unreadable or too short", case, evidence=ev)
    target = bundle.cases[case].target_temperature_K if case in bundle.cases else 298.15
    n = len(data["Temperature"])
    last = slice(n // 2, n)
    problems, notes = [], []
    if not all(np.all(np.isfinite(v)) for v in data.values()):
        problems.append("non-finite values in the energy file")
    t_last = data["Temperature"][last]
    t_mean = float(np.mean(t_last))
    tol = max(TEMPERATURE_TOL_K, 4.0 * _standard_error(t_last))
    notes.append(f"<T> = {t_mean:.2f} K (target {target:.2f} K, tolerance {tol:.1f} K)")
    if abs(t_mean - target) > tol:
        problems.append(f"mean temperature {t_mean:.2f} K is off target {target:.2f} K")
    if "Density" in data:
        d = data["Density"]
        q = n // 4
        d1, d2 = float(np.mean(d[n // 2: n // 2 + q])), float(np.mean(d[n - q:]))
        d_blocks = np.array([b.mean() for b in np.array_split(d[last], 4)])
        allowed = max(DENSITY_DRIFT_TOL * abs(d2), T_975_DOF3 * float(d_blocks.std(ddof=1)))
        drift = abs(d2 - d1) / max(abs(d2), 1e-12)
        notes.append(f"density {d2:.1f} kg/m3, drift {100 * drift:.2f} % (allowed {100 * allowed / abs(d2):.2f} %)")
        ev.append(Evidence(rel, key="Density"))
        if abs(d2 - d1) > allowed:
            problems.append(f"density still drifting ({100 * drift:.1f} % between the last two quarters)")
    claimed = run.stage_state(case, "equil")
    if problems:
        return Judgment("Sim3", 0.0, "; ".join(problems + notes), case, evidence=ev)
    if claimed is None or claimed.get("state") != "valid":
        return Judgment("Sim3", 0.5, "recomputed diagnostics support production entry but the run recorded no "
                        "valid equilibration stage state; " + "; ".join(notes), case, evidence=ev)
    return Judgment("Sim3", 1.0, "; ".join(notes), case, evidence=ev)


def production_attempts(run: RunData, case: str) -> list[dict]:
    """Completed production attempts of a case that no completed continuation supersedes (branch leaves)."""
    prod = [a for a in run.attempts.values() if a.get("case") == case
            and (canonical_stage(str(a.get("stage", ""))) == "prod" or str(a.get("kind", "")).startswith("prod"))]
    done = [a for a in prod if a.get("status") == "completed"]
    parents = {a.get("parent") for a in done if a.get("relation") in ("continuation", "extension", "restart")}
    return [a for a in done if a.get("id") not in parents]


def _production_files(run: RunData, case: str, pf: ProdFiles, problems: list[str], partial: list[str]) -> None:
    """Fill ``pf`` with the canonical production branch's attempt and files (tpr, xtc, edr, log, cpt), noting
    a non-unique branch or missing files in ``partial``/``problems``."""
    leaves = production_attempts(run, case)
    arts: dict[str, str] | None = None
    if len(leaves) == 1:
        pf.attempt = leaves[0].get("id")
        arts = leaves[0].get("artifacts") if isinstance(leaves[0].get("artifacts"), dict) else None
    elif len(leaves) > 1:
        partial.append(f"{len(leaves)} completed production branches and none marked discarded: canonical "
                       "branch not unique")
    else:
        partial.append("no completed production attempt in the ledger")
    xtcs = _pick(run, case, "prod", ".xtc", arts)
    stem = xtcs[-1].rsplit("/", 1)[-1][: -len(".xtc")] if xtcs else None
    for ext in ("tpr", "xtc", "edr", "log", "cpt"):
        hits = _pick(run, case, "prod", f".{ext}", arts, stem=stem)
        if len(hits) > 1 and arts is None:
            partial.append(f"{len(hits)} .{ext} files in production without a canonical attempt naming one")
        setattr(pf, ext, hits[-1] if hits else None)
    for ext in ("tpr", "xtc", "edr", "log"):
        if getattr(pf, ext) is None:
            problems.append(f"production .{ext} missing")


def locate_production(run: RunData, case: str) -> ProdFiles:
    """The canonical production branch's attempt and files as :func:`check_production` locates them, from the
    record and the stage directory's listing alone (no file read)."""
    pf = ProdFiles()
    _production_files(run, case, pf, [], [])
    return pf


def _read_trajectory(run: RunData, case: str, pf: ProdFiles, n_atoms: int, decode: bool,
                     partial: list[str]) -> tuple[Any, np.ndarray | None]:
    """Frame count and first/last time of the production trajectory into ``pf``: frame headers always,
    every frame's coordinates when ``decode`` (or the header scan cannot say). Returns (the integrity scan,
    the first frame's box [nm] or None); raises ``ValueError`` (or a reader error) on an unreadable or
    inconsistent trajectory."""
    integrity = scan_xtc(run.fs.resolve(pf.xtc))  # issue 25: a trajectory cut mid-frame is read to its last
    first_box = None                              # complete frame; a file that is no xtc is one clear error
    if not decode and integrity.checked and integrity.n_atoms > 9:
        if integrity.n_atoms != n_atoms:
            raise ValueError(f"trajectory has {integrity.n_atoms} atoms, run input {n_atoms}")
        if integrity.bad_precision_frames or integrity.non_finite_box_frames:
            bad = integrity.bad_precision_frames + integrity.non_finite_box_frames
            raise ValueError(f"non-finite coordinates or box in {bad} frame header(s)")
        if integrity.first_box_nm is not None:
            first_box = np.asarray(integrity.first_box_nm, dtype=np.float64).reshape(3, 3)
        times = [integrity.first_time_ps, integrity.last_time_ps]
        pf.n_frames = int(integrity.n_frames)
    else:
        from MDAnalysis.lib.formats.libmdaxdr import XTCFile  # noqa: PLC0415

        times, keep, sample, boxes = [], sampled_atoms(n_atoms, integrity.n_frames or 1), [], []
        with XTCFile(str(run.fs.resolve(pf.xtc))) as fh:
            for frame in itertools.islice(fh, integrity.n_frames):
                if first_box is None:
                    first_box = np.asarray(frame.box, dtype=np.float64)
                if frame.x.shape[0] != n_atoms:
                    raise ValueError(f"trajectory has {frame.x.shape[0]} atoms, run input {n_atoms}")
                if not np.all(np.isfinite(frame.x)):
                    raise ValueError(f"non-finite coordinates at t = {frame.time} ps")
                times.append(float(frame.time))
                sample.append(np.asarray(frame.x[keep], dtype=np.float32))  # issue 45: the frames compared
                boxes.append(np.diag(np.asarray(frame.box, dtype=np.float64)))
        pf.n_frames = len(times)
        pf.frame_sample = (np.asarray(sample, dtype=np.float64), np.asarray(boxes))
    if not times or pf.n_frames == 0:
        raise ValueError("trajectory has no frames")
    pf.t_first_ps, pf.t_last_ps = float(times[0]), float(times[-1])
    if integrity.truncated:  # issue 25: stated as a finding, rated as a partial production
        run.fs.add("trajectory_truncated", integrity.describe()[:300], pf.xtc, item="Sim4", case=case)
        partial.append(f"trajectory cut mid-frame: {integrity.n_frames} complete frames used")
    return integrity, first_box


def _production_consistency(run: RunData, pf: ProdFiles, edr: dict[str, np.ndarray], n_atoms: int,
                            integrity: Any, first_box: np.ndarray | None, problems: list[str],
                            partial: list[str]) -> None:
    """Energy file, log and ledger against the trajectory; ``pf.extra`` (atom count, sampling intervals,
    species charges, mean temperature and volume) filled on the way."""
    t_edr = edr["Time"]
    dt_x = (pf.t_last_ps - pf.t_first_ps) / max(1, pf.n_frames - 1)
    dt_e = float(np.median(np.diff(t_edr))) if len(t_edr) > 1 else 0.0
    if abs(float(t_edr[-1]) - pf.t_last_ps) > max(dt_x, dt_e) + 1e-6:
        problems.append(f"energy file ends at {t_edr[-1]:.3f} ps, trajectory at {pf.t_last_ps:.3f} ps")
    log_text = run.fs.read_text(pf.log, item="Sim4") or ""
    if "Finished mdrun" not in log_text:
        partial.append("production log does not show a finished mdrun")
    pf.extra = {"n_atoms": n_atoms, "edr_dt_ps": dt_e, "xtc_dt_ps": dt_x, "edr_keys": sorted(edr),
                "charges_e": species_charges(tpr_universe(run, pf.tpr))}
    if integrity.truncated:
        pf.extra["torn"] = True  # the length checks of record_checks defer to the trajectory_truncated finding
    if "Temperature" in edr and len(edr["Temperature"]):
        pf.extra["temperature_K_mean"] = float(np.mean(edr["Temperature"]))
    if "Volume" in edr and len(edr["Volume"]):
        pf.extra["volume_nm3_mean"] = float(np.mean(edr["Volume"]))
    else:
        if first_box is not None and first_box.shape == (3, 3):   # XTC box vectors [nm] (constant volume)
            pf.extra["volume_nm3_mean"] = float(abs(np.linalg.det(first_box)))
    if pf.attempt is not None:
        a = run.attempts[pf.attempt]
        try:
            span = float(a.get("completed_steps", 0)) * float(a.get("dt_ps", 0))
            if span > 0 and abs(span - (pf.t_last_ps - pf.t_first_ps)) > max(2 * dt_x, 0.01 * span) and \
                    a.get("parent") is None:
                problems.append(f"ledger says {span:.3f} ps for attempt {pf.attempt}, trajectory spans "
                                f"{pf.t_last_ps - pf.t_first_ps:.3f} ps")
        except (TypeError, ValueError):
            partial.append("attempt ledger row lacks numeric steps/dt")


def check_production(run: RunData, case: str, decode: bool = True) -> tuple[Judgment, ProdFiles]:
    """Sim4: one canonical production branch whose files are readable and mutually consistent.

    ``decode=False`` takes frame count, times, atom count, box and coordinate precision from the frame headers
    alone (:func:`mdbench.trajcheck.scan_xtc`) and leaves decompressing every frame to the canonical
    reanalysis, which reads them all anyway; the audit repeats this check with ``decode=True`` when the
    reanalysis cannot read the trajectory.
    """
    pf = ProdFiles()
    problems: list[str] = []
    partial: list[str] = []
    _production_files(run, case, pf, problems, partial)
    ev = [Evidence(p) for p in (pf.tpr, pf.xtc, pf.edr, pf.log, pf.cpt) if p]
    if problems:
        return Judgment("Sim4", 0.0, "; ".join(problems + partial), case, evidence=ev), pf
    if pf.cpt is None:
        partial.append("no checkpoint retained")
    try:
        n_atoms = len(tpr_universe(run, pf.tpr).atoms)
    except Exception as exc:  # noqa: BLE001
        run.fs.add("unreadable_tpr", f"cannot read production run input: {type(exc).__name__}"[:300], pf.tpr,
                   item="Sim4", case=case)
        return Judgment("Sim4", 0.0, "production .tpr unreadable", case, evidence=ev), pf
    try:
        integrity, first_box = _read_trajectory(run, case, pf, n_atoms, decode, partial)
    except Exception as exc:  # noqa: BLE001
        run.fs.add("unreadable_trajectory", f"trajectory unreadable or inconsistent: {exc}"[:300], pf.xtc,
                   item="Sim4", case=case)
        return Judgment("Sim4", 0.0, f"production trajectory unreadable or inconsistent ({exc})"[:300], case,
                        evidence=ev), pf
    edr = _edr(run, pf.edr, "Sim4", case)
    if edr is None or "Time" not in edr or len(edr["Time"]) == 0:
        return Judgment("Sim4", 0.0, "production energy file unreadable", case, evidence=ev), pf
    _production_consistency(run, pf, edr, n_atoms, integrity, first_box, problems, partial)
    pf.readable = not problems
    notes = [f"{pf.n_frames} frames, {pf.t_first_ps:.3f}–{pf.t_last_ps:.3f} ps, {n_atoms} atoms"]
    if problems:
        return Judgment("Sim4", 0.0, "; ".join(problems + partial), case, evidence=ev), pf
    if partial:
        return Judgment("Sim4", 0.5, "; ".join(partial + notes), case, evidence=ev), pf
    return Judgment("Sim4", 1.0, "canonical production branch consistent: " + "; ".join(notes), case,
                    evidence=ev), pf
