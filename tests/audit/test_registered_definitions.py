"""Issue 37, class 2: the canonical reanalysis at the run's registered definitions — coordination cutoff and
channel, MSD fit window, guard — compared with the run's numbers; a required observable whose registered
definition the reanalysis cannot express is itself an A2 finding. Built from the real tiny run; planted
magnitudes from ``MDBENCH_TEST_SEED``. The honest run keeps its score.
"""

from __future__ import annotations

import json
from pathlib import Path

import _runbuilder as rb
import numpy as np
import pytest
from _audit_helpers import edit_results, judgment, reanalysed, state

from _testseed import seed_for
from mdbench.audit import registered_definitions
from mdbench.audit.runread import as_entry, load_run, read_recorded_curve
from mdbench.audit.safeio import RunFS
from mdbench.record import RunRecord

CASE = rb.CASE
pytestmark = pytest.mark.gromacs
D_KEYS = ("D_na", "D_cl", "D_sol")


def _rng(label: str) -> np.random.Generator:
    return np.random.default_rng(seed_for(f"audit-registered/{label}"))


def _rewrite_registration(run: Path, kind: str, fn) -> None:
    """Change the definition of the run's ``kind`` registration in place (as if registered so from the start)."""
    path = run / "run_record" / "registrations.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    hit = [r for r in rows if r.get("kind") == kind]
    assert hit, kind
    for r in hit:
        fn(r["definition"])
    path.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows))


def _codes(doc: dict, group: str) -> list[str]:
    return [c["code"] for o in doc["observables"] if o["case"] == CASE and o["observable"] == group
            for c in o["checks"]]


def _strip_own_windows(doc: dict) -> None:
    """A foreign run's D entries state no fit window of their own: only the registration says which."""
    for k in D_KEYS:
        doc["observables"]["self_diffusion"][k].pop("fit_window_ps", None)


def _block_length_ps(doc: dict) -> float:
    br = doc["observables"]["self_diffusion"]["D_na"]["block_ranges_ps"]
    return float(br[0][1]) - float(br[0][0])


# ----------------------------------------------------------------------------------------------- honest run
def test_honest_run_is_compared_at_its_registered_cn_cutoff_and_window(built, tmp_path):
    """The honest run's CN (registered Na–OW at 0.32 nm) is compared with the reanalysis at that cutoff, not
    "not compared"; its D entries stripped of their own window are compared on the registered window
    ([0.1, 0.5] × the block length): no required observable is left unverified, the score is unchanged."""
    run, bundle = built
    res, doc = reanalysed(run, bundle, tmp_path / "a")
    assert doc["reanalysis"]["cases"][CASE]["registered_settings"]["fixed_cn_cutoff_nm"] == 0.32
    cn = _codes(doc, "coordination")
    assert "agrees_with_canonical" in cn and "definition_differs_from_canonical" not in cn, cn
    assert not [f for f in doc["findings"] if f["code"] == "required_not_compared"]
    assert judgment(doc, "A2", CASE, "coordination")["rating"] == 1.0
    assert judgment(doc, "A3", CASE, "coordination")["rating"] == 1.0


def test_d_without_its_own_window_is_compared_on_the_registered_window(run_copy, bundle, tmp_path):
    """D entries that state no window: compared with the trajectory (and with their recorded MSD) over the
    registered window; the honest values pass. Before, such a D was "canonical not eligible … not compared"."""
    edit_results(run_copy, _strip_own_windows)
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    codes = _codes(doc, "self_diffusion")
    assert "canonical_not_eligible" not in codes, codes
    assert codes.count("agrees_with_recorded_curve") >= 2 * len(D_KEYS), codes
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1.0


def _d_on_window(run: Path, doc: dict, window: tuple[float, float]) -> dict[str, tuple[float, float]]:
    """Each (D [m^2/s], MSD exponent β) re-fitted by the run itself on ``window`` from the MSD it recorded: the
    diffusion module's slope/6 and the log-log slope, with the window's edges on the recorded lags."""
    from mdbench.audit.transport import curve_diffusion

    data = load_run(RunFS(run))
    out = {}
    for k in D_KEYS:
        e = as_entry(f"observables.self_diffusion.{k}", doc["observables"]["self_diffusion"][k])
        curve = read_recorded_curve(data, CASE, e, k.split("_", 1)[1].upper())
        D, beta, _n = curve_diffusion(curve.lag_ps, curve.msd_nm2, window)
        out[k] = (D, beta)
    return out


def test_registered_other_window_with_values_that_follow_from_it_passes(run_copy, bundle, tmp_path):
    """The run registers another MSD window ([f, 0.5] × the block length, f drawn from the seed) and reports D
    re-fitted on it: the audit compares on that window and finds nothing."""
    f = float(_rng("window").choice([0.2, 0.25, 0.3]))
    _rewrite_registration(run_copy, "transport_definitions", lambda d: d.update(
        diffusion_fit=f"linear fit of the time-origin-averaged MSD over lags [{f}, 0.5] x the block length"))
    doc0 = json.loads((run_copy / "analysis" / CASE / "results.json").read_text())
    lb = _block_length_ps(doc0)
    new = _d_on_window(run_copy, doc0, (f * lb, 0.5 * lb))

    def refit(doc):
        _strip_own_windows(doc)
        for k, (d, beta) in new.items():  # an honest refit reports the value and the regime on its window
            e = doc["observables"]["self_diffusion"][k]
            e["blocks"] = [b * d / e["value"] for b in e["blocks"]]
            e["value"], e["beta"] = d, beta
            checks = e["diagnostics"]["sampling_checks"]
            for name in [n for n in checks if n.startswith("diffusive regime")]:
                lo, hi = (float(x) for x in name.split("[", 1)[1].rstrip("])").split(","))
                checks[name] = lo <= beta <= hi
    edit_results(run_copy, refit)
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    codes = _codes(doc, "self_diffusion")
    assert "value_contradicts_reanalysis" not in codes and "outside_canonical_r5" not in codes, codes
    assert codes.count("agrees_with_recorded_curve") >= 2 * len(D_KEYS), codes
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 1.0, [f["message"] for f in doc["findings"] if f.get("item") == "A3"]


def test_values_that_do_not_follow_from_the_registered_window_are_caught(run_copy, bundle, tmp_path):
    """D scaled by a planted factor, no window stated on the entries: on the registered window neither the
    run's own recorded MSD nor the trajectory gives those values: A3 = 0 and F."""
    r = _rng("factor")
    fac = float(r.uniform(1.3, 1.9) if r.random() < 0.5 else r.uniform(0.3, 0.7))

    def plant(doc):
        _strip_own_windows(doc)
        for k in D_KEYS:
            e = doc["observables"]["self_diffusion"][k]
            e["value"] *= fac
            e["blocks"] = [b * fac for b in e["blocks"]]
    edit_results(run_copy, plant)
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert judgment(doc, "A3", CASE, "self_diffusion")["rating"] == 0.0
    assert state(doc, CASE, "self_diffusion") == "F"
    assert "value_contradicts_reanalysis" in _codes(doc, "self_diffusion")


# ------------------------------------------------------------------------------------------- cutoff, channel
def _cn_at(run: Path, cutoff_nm: float) -> dict:
    """Na–OW coordination number at ``cutoff_nm`` with its four blocks (the runbuilder's estimator)."""
    import MDAnalysis as mda
    from MDAnalysis.lib.distances import capped_distance

    from mdbench.analysis.blocks import block_estimate, block_windows

    prod = run / "cases" / CASE / "prod"
    u = mda.Universe(str(prod / "prod.tpr"), str(prod / "prod.xtc"))
    na, ow = u.select_atoms("resname NA"), u.select_atoms("name OW")
    times, cn = [], []
    for ts in u.trajectory:
        times.append(ts.time)
        cn.append(len(capped_distance(na.positions, ow.positions, cutoff_nm * 10.0, box=ts.dimensions,
                                      return_distances=False)) / len(na))
    win = block_windows(np.asarray(times), rb.GUARD_PS)
    x = np.asarray(cn)
    return block_estimate(float(x[win.whole].mean()), [float(x[b].mean()) for b in win.blocks], "1",
                          block_ranges_ps=win.block_ranges_ps).to_dict()


def test_cn_at_another_cutoff_than_registered_is_caught(run_copy, bundle, tmp_path):
    """CN counted at a planted wider cutoff while the entry and the registration say 0.32 nm: the reanalysis at
    the registered 0.32 nm disagrees: A3 = 0 and F."""
    est = _cn_at(run_copy, float(_rng("cn-cutoff").uniform(0.42, 0.5)))

    def plant(doc):
        e = doc["observables"]["coordination"]["cn_na_o_sol"]
        e.update({k: est[k] for k in ("value", "blocks", "uncertainty", "block_ranges_ps")})
    edit_results(run_copy, plant)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert judgment(doc, "A3", CASE, "coordination")["rating"] == 0.0
    assert state(doc, CASE, "coordination") == "F"


def _cn_left_not_compared(run_copy, bundle, out, registration, cutoff_nm: float) -> None:
    """Register the coordination definition ``registration`` makes, plant the required CN counted at
    ``cutoff_nm`` (the entry states it), audit: the reanalysis cannot express the registration, so the CN is
    "not compared" and that is an A2 finding (A2 ≤ ½), not a silent pass."""
    _rewrite_registration(run_copy, "coordination_definition", registration)
    est = _cn_at(run_copy, cutoff_nm)

    def plant(doc):
        e = doc["observables"]["coordination"]["cn_na_o_sol"]
        e.update({k: est[k] for k in ("value", "blocks", "uncertainty", "block_ranges_ps")}, cutoff_nm=cutoff_nm)
    edit_results(run_copy, plant)
    _res, doc = reanalysed(run_copy, bundle, out)
    assert "fixed_cn_cutoff_nm" not in (doc["reanalysis"]["cases"][CASE].get("registered_settings") or {})
    assert "definition_differs_from_canonical" in _codes(doc, "coordination")
    hits = [f for f in doc["findings"] if f["code"] == "required_not_compared"]
    assert hits and all(f["item"] == "A2" and f["case"] == CASE for f in hits), doc["findings"]
    assert judgment(doc, "A2", CASE, "coordination")["rating"] == 0.5


def test_required_observable_at_a_definition_the_audit_cannot_express_is_an_A2_finding(run_copy, bundle, tmp_path):
    """The run registers (and its entry states) a CN cutoff beyond the neighbour range the reanalysis stores."""
    cut = float(_rng("far-cutoff").uniform(0.7, 0.9))
    _cn_left_not_compared(run_copy, bundle, tmp_path / "a", lambda d: d.update(cutoff_nm=cut), cut)


def test_several_registered_cn_cutoffs_leave_the_required_cn_not_compared_and_that_is_an_A2_finding(
        run_copy, bundle, tmp_path):
    """The run registers two different CN cutoffs by channel (Na–OW and Na–Cl, drawn from the seed): one fixed
    reanalysis cutoff cannot express both, so the reanalysis runs at its own cutoffs and the required CN,
    counted at its registered Na–OW cutoff, is not compared."""
    rng = _rng("two-cutoffs")
    c_ow, c_cl = round(float(rng.uniform(0.26, 0.30)), 3), round(float(rng.uniform(0.36, 0.42)), 3)
    _cn_left_not_compared(run_copy, bundle, tmp_path / "a",
                          lambda d: (d.pop("cutoff_nm"), d.update(cutoffs_nm={"Na-OW": c_ow, "Na-Cl": c_cl})), c_ow)


# ----------------------------------------------------------------------------------------------------- guard
def test_registered_guard_is_the_reanalysis_guard_and_results_at_another_guard_are_caught(run_copy, bundle,
                                                                                           tmp_path):
    """A run that registers another guard (drawn from the seed) and computes at it: the reanalysis runs at that
    guard and the run keeps its thermodynamics/transport ratings; the same registration with results left at
    the old guard is caught (blocks before the registered guard: A6 ≤ ½, A7 ≤ ½)."""
    guard = round(float(_rng("guard").uniform(0.9, 1.5)), 2)
    _rewrite_registration(run_copy, "guard_block_policy", lambda d: d.update(guard_ps=guard))
    stale = tmp_path / "stale"
    import shutil
    shutil.copytree(run_copy, stale, symlinks=True)
    results = rb.compute_results(run_copy, guard, rb.adequacy_rules())
    (run_copy / "analysis" / CASE / "results.json").write_text(json.dumps(results, indent=1))
    RunRecord(run_copy).add_artifact(f"analysis/{CASE}/results.json")
    for f in sorted((run_copy / "analysis" / CASE).glob("msd_*")):
        RunRecord(run_copy).add_artifact(f"analysis/{CASE}/{f.name}")
    rb.declare_states(run_copy)
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    assert doc["reanalysis"]["cases"][CASE]["status"] == "ok"
    canon = json.loads((tmp_path / "a" / "reanalysis" / CASE / "results.json").read_text())
    assert canon["guard_ps"] == pytest.approx(guard)
    assert not [f for f in doc["findings"] if f["code"] in ("block_layout_invalid", "outside_canonical_r5",
                                                             "value_contradicts_reanalysis")], doc["findings"]
    for g in ("thermodynamics", "self_diffusion", "conductivity"):
        assert judgment(doc, "A3", CASE, g)["rating"] == 1.0, g
    rb.declare_states(stale)
    _res, doc2 = reanalysed(stale, bundle, tmp_path / "b")
    assert any(f["code"] == "block_layout_invalid" for f in doc2["findings"])
    assert judgment(doc2, "A6", CASE)["rating"] <= 0.5 and judgment(doc2, "A7", CASE)["rating"] <= 0.5


# --------------------------------------------------------------------------------------------------- pure rules
def test_registered_windows_and_cutoffs_are_read_from_fields_and_text():
    class Run:
        def __init__(self, regs):
            self.regs = regs

        def in_force(self, *words, case=None):
            return [r for r in self.regs if any(w in (r["kind"] + " " + " ".join(r["definition"])).lower()
                                                for w in words)]
    run = Run([{"kind": "transport_definitions", "definition": {
        "diffusion_fit": "linear fit over lags [0.1, 0.5] x the block length",
        "onsager": {"fit_window_ps": [0.05, 0.2]}}},
        {"kind": "coordination_definition", "definition": {"selection": "Li-O", "cutoff_nm": 0.27}}])
    w = registered_definitions.registered_fit_windows(run, "W")
    assert w["diffusion"] == ("fraction", (0.1, 0.5)) and w["collective"] == ("ps", (0.05, 0.2))
    assert registered_definitions.registered_cn_cutoff(run, "W") == 0.27
    two = Run([{"kind": "coordination_definition", "definition": {"cutoffs_nm": {"SOL:O": 0.3, "TTE:F": 0.4}}}])
    assert registered_definitions.registered_cn_cutoff(two, "W") is None       # one fixed cutoff cannot express two
    far = Run([{"kind": "coordination_definition", "definition": {"cutoff_nm": 0.9}}])
    assert registered_definitions.registered_cn_cutoff(far, "W") is None       # beyond the stored neighbour range
    assert registered_definitions.registered_contact_channels({"FSI:O": 0.3, "FSI:N": 0.3}) == {"FSI": ["O", "N"]}


def test_contact_channel_named_by_the_registration_goes_to_the_reanalysis(run_copy, bundle, tmp_path):
    """A registration naming its contact channel one by one ({"CL:ion": 0.35}) runs the reanalysis with that
    channel and cutoff (contact_channels / contact_cutoffs_nm); the honest CIP/AGG are then compared, not
    "not compared"."""
    _rewrite_registration(run_copy, "association_contact_definition",
                          lambda d: (d.pop("contact_cutoff_nm"), d.update(contact_cutoff_nm={"CL:ion": 0.35})))
    _res, doc = reanalysed(run_copy, bundle, tmp_path / "a")
    reg = doc["reanalysis"]["cases"][CASE]["registered_settings"]
    assert reg["contact_channels"]["CL"] == ["ion"] and reg["contact_cutoffs_nm"]["CL:ion"] == 0.35
    codes = _codes(doc, "association")
    assert "definition_differs_from_canonical" not in codes and "agrees_with_canonical" in codes, codes
    assert judgment(doc, "A3", CASE, "association")["rating"] == 1.0
