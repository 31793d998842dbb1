"""Explore one run directory interactively (``notebooks/explore_run.ipynb``): its stages and ledger, the
equilibration and production time series, the curves and values the run's analysis recorded (the g(r) of
every channel with its registered first minimum from ``analysis/<CASE>/results.json``, the analysis' own MSD
and Green–Kubo figures, D and η with their states), the observable states, and a 3-D view of a frame with the
first shell of one cation highlighted.

What the report and the audit judged is what the analysis recorded: :func:`recorded_results`,
:func:`recorded_rdf` and :func:`recorded_figures` read it. An *independent recomputation* (MDAnalysis'
``InterRDF`` with the running coordination number, ``EinsteinMSD``, a plain Green–Kubo integral of the
energy file: :func:`rdf_with_running_cn`, :func:`msd`, :func:`green_kubo`) may be overlaid, always labelled as
such: it is a cross-check with its own code path, not the judged result.

Everything is read from the run's own files (run_record/, cases/<CASE>/{equil,prod}/); nothing is written into
the run directory (MDAnalysis opens trajectories through a link in a private folder, so its offset caches
never land beside them). The interactive figures are plotly (zoom, hover); the 3-D view is py3Dmol.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from mdbench.analysis.observables import RDF, SELF_DIFFUSION, VISCOSITY
from mdbench.analysis.results import observables_frame, validate_results
from mdbench.errors import InputError

KB_J_PER_K = 1.380649e-23


@dataclass
class CaseFiles:
    """The GROMACS files of one case that the explorer reads (None when absent)."""

    case: str
    tpr: Path | None
    xtc: Path | None
    prod_edr: Path | None
    equil_edrs: list[Path]


def cases(run_dir: str | Path) -> list[CaseFiles]:
    """Every ``cases/<CASE>/`` of a run directory with its production tpr/xtc/edr and equilibration edr files."""
    root = Path(run_dir)
    if not (root / "run_record").is_dir():
        raise InputError("not a run directory (no run_record/)", str(root))
    out = []
    for folder in sorted(p for p in (root / "cases").glob("*") if p.is_dir() and not p.is_symlink()):
        prod = folder / "prod"

        def first(pattern: str, where: Path = prod) -> Path | None:
            found = sorted(p for p in where.glob(pattern) if p.is_file() and not p.is_symlink())
            return found[0] if found else None

        equil = sorted(p for p in (folder / "equil").glob("*.edr") if p.is_file() and not p.is_symlink())
        out.append(CaseFiles(folder.name, first("*.tpr"), first("*.xtc"), first("*.edr"), equil))
    return out


def stages(run_dir: str | Path) -> pd.DataFrame:
    """One row per (case, stage): state and reason from ``run_record/stage_states.json``."""
    from mdbench.record import RunRecord

    rows = []
    for case, per_stage in RunRecord(run_dir).stage_states().items():
        for stage, st in (per_stage or {}).items():
            st = st if isinstance(st, dict) else {}
            rows.append({"case": case, "stage": stage, "state": st.get("state"), "reason": st.get("reason")})
    return pd.DataFrame(rows, columns=["case", "stage", "state", "reason"])


def ledger(run_dir: str | Path) -> pd.DataFrame:
    """The attempts ledger: one row per MD segment with its ns planned and charged."""
    from mdbench.record import RunRecord

    rows = []
    for a in RunRecord(run_dir).attempts():
        planned = int(a.get("planned_steps", 0)) * float(a.get("dt_ps", 0.0)) / 1000.0
        rows.append({"id": a.get("id"), "case": a.get("case"), "stage": a.get("stage"), "kind": a.get("kind"),
                     "relation": a.get("relation"), "status": a.get("status"), "planned_ns": planned,
                     "charged_ns": float(a.get("ns_charged", 0.0))})
    return pd.DataFrame(rows, columns=["id", "case", "stage", "kind", "relation", "status", "planned_ns",
                                       "charged_ns"])


def states(run_dir: str | Path) -> pd.DataFrame:
    """The run's declared observable states (``run_record/observables.json``), one row per case × group."""
    from mdbench import untrusted

    path = Path(run_dir) / "run_record" / "observables.json"
    doc, _ = untrusted.try_read_json(path) if path.is_file() else (None, None)
    rows = []
    for case, groups in (doc or {}).items() if isinstance(doc, dict) else []:
        for group, entry in (groups or {}).items() if isinstance(groups, dict) else []:
            entry = entry if isinstance(entry, dict) else {}
            rows.append({"case": case, "observable group": group, "state": entry.get("state"),
                         "reason": entry.get("reason")})
    return pd.DataFrame(rows, columns=["case", "observable group", "state", "reason"])


def energy_series(edrs: list[Path], terms: tuple[str, ...] = ("Temperature", "Pressure", "Density", "Volume",
                                                              "Potential")) -> pd.DataFrame:
    """Long table (segment, time_ps, term, value) of the chosen energy terms of several .edr files."""
    import pyedr

    rows = []
    for edr in edrs:
        data = pyedr.edr_to_dict(str(edr))
        time = np.asarray(data.get("Time", []), dtype=float)
        for term in terms:
            if term in data:
                rows.append(pd.DataFrame({"segment": edr.stem, "time_ps": time, "term": term,
                                          "value": np.asarray(data[term], dtype=float)}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["segment", "time_ps", "term", "value"])


def series_figure(series: pd.DataFrame, title: str):
    """plotly: one panel per energy term against time, one line per segment (hover shows the values)."""
    import plotly.express as px

    if not len(series):
        return None
    fig = px.line(series, x="time_ps", y="value", color="segment", facet_row="term",
                  height=220 * series["term"].nunique(), labels={"time_ps": "time [ps]", "value": ""}, title=title)
    fig.update_yaxes(matches=None)
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
    return fig


@contextlib.contextmanager
def universe(files: CaseFiles) -> Iterator[Any]:
    """An MDAnalysis Universe of the production, opened through a private link (no offset cache written)."""
    from mdbench.analysis.reduce.topology import tpr_universe

    if files.tpr is None or files.xtc is None:
        raise InputError("no production tpr/xtc", f"cases/{files.case}/prod")
    with tempfile.TemporaryDirectory(prefix="mdbench-explore-") as private:
        link = Path(private) / files.xtc.name
        os.symlink(os.path.realpath(files.xtc), link)
        yield tpr_universe(files.tpr, link)


def ions(u) -> tuple[Any, Any]:
    """(cations, anions) as AtomGroups of single-atom or molecular ions by residue charge; Li first."""
    charges = {}
    for res in u.residues:
        charges.setdefault(res.resname, round(float(res.atoms.charges.sum()), 3))
    cat = [n for n, q in charges.items() if q > 0.5]
    an = [n for n, q in charges.items() if q < -0.5]
    cat.sort(key=lambda n: (not n.upper().startswith("LI"), n))

    def pick(names: list[str]) -> Any:
        return u.select_atoms("resname " + " ".join(names)) if names else u.atoms[[]]

    return pick(cat), pick(an)


def rdf_with_running_cn(u, centre, partner, r_max_nm: float = 1.0, n_bins: int = 100) -> pd.DataFrame:
    """g(r) of ``centre``–``partner`` and the running coordination number N(r) = 4π ρ ∫ g r² dr [molecules]."""
    from MDAnalysis.analysis.rdf import InterRDF

    rdf = InterRDF(centre, partner, nbins=n_bins, range=(0.0, r_max_nm * 10.0), exclusion_block=None).run()
    r_nm = rdf.results.bins / 10.0
    g = rdf.results.rdf
    volume_nm3 = float(np.mean([ts.volume for ts in u.trajectory])) / 1000.0
    rho = len(partner) / volume_nm3
    dr = r_nm[1] - r_nm[0]
    n_r = np.cumsum(4.0 * np.pi * rho * g * r_nm ** 2 * dr)
    return pd.DataFrame({"r_nm": r_nm, "g": g, "N": n_r})


#: Legend label of every curve the explorer computes itself.
RECOMPUTED = "independent recomputation (not the judged result)"


def recorded_results(run_dir: str | Path, case: str) -> tuple[dict[str, Any] | None, str]:
    """(the case's ``analysis/<CASE>/results.json``, "") as the analysis wrote it, or (None, why not) when it
    is missing, unreadable or does not match the schema (a hostile run directory gives a reason, never a crash)."""
    from mdbench import untrusted

    path = Path(run_dir) / "analysis" / case / "results.json"
    if not path.is_file() or path.is_symlink():
        return None, f"no results.json of case {case} (analysis/{case}/results.json): run `mdbench analyze`"
    doc, refused = untrusted.try_read_json(path)
    if refused is not None:
        return None, f"analysis/{case}/results.json refused: {refused}"
    try:
        validate_results(doc, str(path))
    except InputError as exc:
        return None, str(exc)
    return doc, ""


def recorded_rdf(doc: dict[str, Any]) -> pd.DataFrame:
    """Long table (channel, r_nm, g, first_min_nm) of the g(r) curves the analysis recorded, with the first
    minimum by the registered rule (NaN where the channel has none)."""
    rows = []
    for name, ob in doc["observables"].items():
        curve = (ob.get("details") or {}).get("curve") if RDF.owns(name) else None
        if not isinstance(curve, dict) or not isinstance(curve.get("r_nm"), list):
            continue
        r, g = curve["r_nm"], curve.get("g") or []
        n = min(len(r), len(g))
        first_min = ob.get("value") if isinstance(ob.get("value"), (int, float)) else float("nan")
        rows.append(pd.DataFrame({"channel": name.split("/", 1)[-1], "r_nm": np.asarray(r[:n], dtype=float),
                                  "g": np.asarray([np.nan if v is None else v for v in g[:n]], dtype=float),
                                  "first_min_nm": first_min}))
    return (pd.concat(rows, ignore_index=True) if rows
            else pd.DataFrame(columns=["channel", "r_nm", "g", "first_min_nm"]))


def recorded_rdf_figure(table: pd.DataFrame, overlay: pd.DataFrame | None = None, overlay_label: str = ""):
    """plotly: the recorded g(r) of every channel with its first minimum (dotted); ``overlay`` (columns r_nm,
    g) drawn dashed and labelled as an independent recomputation."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for channel, t in table.groupby("channel", sort=False):
        fig.add_scatter(x=t["r_nm"], y=t["g"], name=f"{channel} (recorded by the analysis)")
        first_min = float(t["first_min_nm"].iloc[0])
        if np.isfinite(first_min):
            fig.add_vline(x=first_min, line_dash="dot", annotation_text=f"{channel} first minimum")
    if overlay is not None and len(overlay):
        fig.add_scatter(x=overlay["r_nm"], y=overlay["g"], name=f"{overlay_label} — {RECOMPUTED}",
                        line={"dash": "dash"})
    fig.update_layout(title="g(r) recorded by the analysis (what the report and the audit judged)", height=380)
    fig.update_xaxes(title_text="r [nm]")
    fig.update_yaxes(title_text="g(r)")
    return fig


def recorded_transport(doc: dict[str, Any]) -> pd.DataFrame:
    """The recorded self-diffusion coefficients and viscosity with their 95 % half-widths and states."""
    return observables_frame(doc, (SELF_DIFFUSION.category, VISCOSITY.category))


def recorded_figures(run_dir: str | Path, case: str, doc: dict[str, Any],
                     names: tuple[str, ...] = (SELF_DIFFUSION.figure, VISCOSITY.figure)) -> dict[str, Path]:
    """The analysis' own PNG figures of ``names`` (figure name → file in ``analysis/<CASE>/``; a name the
    results do not list, or a file outside that folder or behind a link, is left out)."""
    folder = (Path(run_dir) / "analysis" / case).resolve()
    out = {}
    for name in names:
        fname = (doc.get("figures") or {}).get(name)
        path = folder / fname if isinstance(fname, str) else None
        if path is not None and path.is_file() and not path.is_symlink() and path.resolve().parent == folder:
            out[name] = path
    return out


def rdf_figure(table: pd.DataFrame, label: str):
    """plotly: g(r) and N(r) on a second axis (an independent recomputation: labelled so)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=table["r_nm"], y=table["g"], name="g(r)")
    fig.add_scatter(x=table["r_nm"], y=table["N"], name="running N(r)", secondary_y=True)
    fig.update_layout(title=f"RDF {label} with its running coordination number — {RECOMPUTED}", height=360)
    fig.update_xaxes(title_text="r [nm]")
    fig.update_yaxes(title_text="g(r)", secondary_y=False)
    fig.update_yaxes(title_text="N(r) [molecules]", secondary_y=True)
    return fig


def msd(u, groups: dict[str, Any]) -> pd.DataFrame:
    """Long table (species, lag_ps, msd_nm2) of the Einstein MSD of each group (unwrapped with NoJump)."""
    from MDAnalysis.analysis.msd import EinsteinMSD
    from MDAnalysis.transformations import NoJump

    u.trajectory.add_transformations(NoJump())
    dt_ps = float(u.trajectory.dt)
    rows = []
    for name, group in groups.items():
        if len(group) == 0:
            continue
        m = EinsteinMSD(group, msd_type="xyz", fft=True).run()
        lag = np.arange(len(m.results.timeseries)) * dt_ps
        rows.append(pd.DataFrame({"species": name, "lag_ps": lag, "msd_nm2": m.results.timeseries / 100.0}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["species", "lag_ps", "msd_nm2"])


def green_kubo(edr: Path, temperature_k: float | None = None) -> pd.DataFrame:
    """Running Green-Kubo integral of the shear viscosity from the off-diagonal pressure tensor of ``edr``.

    eta(t) = V / (k_B T) ∫_0^t <P_ab(0) P_ab(t')> dt', averaged over xy, xz, yz [mPa s].
    """
    import pyedr

    d = pyedr.edr_to_dict(str(edr))
    need = ("Pres-XY", "Pres-XZ", "Pres-YZ", "Volume")
    if any(k not in d for k in need):
        return pd.DataFrame(columns=["time_ps", "eta_mPa_s"])
    t = np.asarray(d["Time"], dtype=float)
    dt_s = float(np.median(np.diff(t))) * 1e-12
    temperature = float(np.mean(d["Temperature"])) if temperature_k is None else temperature_k
    volume_m3 = float(np.mean(d["Volume"])) * 1e-27
    acf = 0.0
    for key in need[:3]:
        p = (np.asarray(d[key], dtype=float) - np.mean(d[key])) * 1e5  # bar -> Pa
        n = len(p)
        f = np.fft.rfft(p, 2 * n)
        acf = acf + np.fft.irfft(f * np.conj(f))[:n] / np.arange(n, 0, -1)
    acf = acf / 3.0
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (acf[1:] + acf[:-1]) * dt_s)])
    eta = volume_m3 / (KB_J_PER_K * temperature) * integral * 1e3
    half = len(t) // 2  # beyond half the series the correlation is noise
    return pd.DataFrame({"time_ps": t[:half] - t[0], "eta_mPa_s": eta[:half]})


def first_shell_view(u, centre_atom, shell_nm: float = 0.3, width: int = 640, height: int = 420):
    """py3Dmol view of the first frame: everything as thin lines, one cation as a sphere and every atom of
    the residues within ``shell_nm`` of it as sticks (its first shell)."""
    import py3Dmol

    u.trajectory[0]
    near = u.select_atoms(f"around {shell_nm * 10.0} index {centre_atom.index}").residues.atoms
    with tempfile.TemporaryDirectory() as tmp:
        pdb = Path(tmp) / "frame.pdb"
        u.atoms.write(str(pdb))
        text = pdb.read_text()
    view = py3Dmol.view(width=width, height=height)
    view.addModel(text, "pdb")
    view.setStyle({"line": {"colorscheme": "grayCarbon", "opacity": 0.4}})
    view.setStyle({"serial": [int(i) + 1 for i in near.indices]}, {"stick": {"radius": 0.15}})
    view.setStyle({"serial": int(centre_atom.index) + 1}, {"sphere": {"radius": 0.8, "color": "purple"}})
    view.zoomTo({"serial": [int(i) + 1 for i in near.indices] + [int(centre_atom.index) + 1]})
    return view, len(near.residues)


def results_summary(run_dir: str | Path) -> dict[str, Any]:
    """Small machine-readable summary for the notebook's scraps (cases, stages, attempts)."""
    st, led = stages(run_dir), ledger(run_dir)
    return {"cases": [c.case for c in cases(run_dir)], "n_stage_states": int(len(st)),
            "n_attempts": int(len(led)), "charged_ns": float(led["charged_ns"].sum()) if len(led) else 0.0}


def to_json(obj: Any) -> str:
    """JSON of a summary (for scrapbook)."""
    return json.dumps(obj, sort_keys=True)
