"""Scripted defects of seed 000 §4.3, applied to a finished oracle run by ``mdbench-buggy-agent KIND``.

Each defect rewrites the run directory the way the failing agent in the seed left its own: the analysis
results, the observable states it recorded, ``report.md``, the artifact inventory (so that provenance stays
consistent and only the defect is wrong) and the terminal claim. The audit must land each on the item the
seed names:

``tplus_convention`` (case 1, a physical-definition error called a sampling problem)
    t+ from signed-charge-weighted Onsager coefficients σ_ij = e² z_i z_j L^ij fed into the formula for
    unweighted L^ij, whole interval and every block, for all cases; DE and HCE labelled SI, LHCE C; claim
    ``recovered_valid``. Expected: transference F with **A2 = 0** (and O2 = 0: F classified as SI/C).
``float32_volume`` (case 2, a numerical implementation error)
    The block-wise conductivity and t+ normalised by a float32 product V k_B T, which underflows to 0 in
    SI units (V ≈ 1e-26 m³, k_B T ≈ 4e-21 J): every block σ is inf and every block t+ inf/inf = nan, while
    the whole-interval values (float64) stay finite; the terminal record lists them unresolved and claims
    ``recovered_valid``. Expected: conductivity and transference F with **A3 = 0 and A6 = 0**.
``clean_claim`` (case 3, a clean claim over unresolved analyses)
    Self-diffusion delivered for Li only and without blocks; viscosity, σ and t+ without their four-block
    analyses; the terminal record lists these four categories unresolved and claims ``clean_valid``.
    Expected: **O5 = 0** (and M states, A1 < 1).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mdbench.analysis import observables as registry
from mdbench.errors import InputError

log = logging.getLogger(__name__)

CASES = ("DE", "HCE", "LHCE")
#: Result names and families the defects rewrite, from the observable registry.
SIGMA = registry.SIGMA
SIGMA_NE = registry.SIGMA_NE
D_LI = registry.SELF_DIFFUSION.key("LI")
_T, _S, _D = registry.TRANSFERENCE.name + "/", registry.CONDUCTIVITY.name + "/", registry.SELF_DIFFUSION.name + "/"
#: Boltzmann constant [J/K] (CODATA 2018, exact).
K_B = 1.380649e-23


@dataclass(frozen=True)
class Defect:
    """One scripted defect: what it does, which seed case it reproduces, where the audit must land it."""

    kind: str
    summary: str
    seed_case: str
    expected_items: dict[str, float]
    apply: Callable[[Path, list[str]], None]


def _cases(run: Path) -> list[str]:
    return [c for c in CASES if (run / "analysis" / c / "results.json").is_file()]


def _load(run: Path, case: str) -> dict[str, Any]:
    return json.loads((run / "analysis" / case / "results.json").read_text(encoding="utf-8"))


def _save(run: Path, case: str, doc: dict[str, Any]) -> None:
    from mdbench.analysis.results import write_results  # noqa: PLC0415

    write_results(run / "analysis" / case / "results.json", doc)


def _set_state(run: Path, case: str, name: str, state: str, reason: str, *, in_results: bool = True) -> None:
    """Record an observable's new state as the pipeline does (JSON-pointer reference, same registration)."""
    from mdbench.record import RunRecord  # noqa: PLC0415

    rec = RunRecord(run)
    previous = (rec.observable_states().get(case) or {}).get(name) or {}
    pointer = name.replace("~", "~0").replace("/", "~1")
    ref = f"analysis/{case}/results.json" + (f"#/observables/{pointer}" if in_results else "")
    rec.set_observable_state(case, name, state, reason, results_ref=ref,
                             registration_id=previous.get("registration_id"))


def _conductivity_L(doc: dict[str, Any]) -> tuple[np.ndarray, list[np.ndarray], list[str], dict[str, float]]:
    sigma = doc["observables"][SIGMA]
    L = sigma["details"]["L"]
    return (np.asarray(L["whole"], dtype=np.float64), [np.asarray(b, dtype=np.float64) for b in L["blocks"]],
            list(doc["system"]["species"]), dict(doc["system"]["charges_e"]))


def _tplus_convention(run: Path, cases: list[str]) -> None:
    from mdbench.analysis.blocks import block_estimate  # noqa: PLC0415
    from mdbench.analysis.onsager import solvent_frame, transference_conventions  # noqa: PLC0415

    labels = {"DE": "SI", "HCE": "SI", "LHCE": "C"}  # as the seed's agent labelled them
    for case in cases:
        doc = _load(run, case)
        obs = doc["observables"]
        L, blocks, species, charges = _conductivity_L(doc)
        n_mol = doc["system"]["n_molecules"]
        state = labels.get(case, "SI")
        reason = "block values scatter; more sampling needed" if state == "SI" else "stable across blocks"
        for name in [k for k in obs if k.startswith(_T)]:
            ref = name.split("/")[1].split(":")[1] if name.split("/")[1].startswith("solvent:") else None

            def mixed(A: np.ndarray, ref: str | None = ref) -> float:
                A = solvent_frame(A, species, n_mol, ref) if ref else A
                return transference_conventions(A, species, charges).t_plus_mixed_sigma_in_unweighted

            bvals = np.asarray([mixed(b) for b in blocks])
            est = block_estimate(mixed(L), [float(b) for b in bvals], "1")  # the analysis' block rule
            frame = f"solvent frame, reference {ref}" if ref else "barycentric frame"
            o = obs[name]
            o.update(value=mixed(L), blocks=[float(b) for b in bvals], state=state, reason=reason,
                     onsager=_signed_coefficients(solvent_frame(L, species, n_mol, ref) if ref else L, species,
                                                  charges),
                     definition="t+ = sum_j z+ z_j s_{+j} / sum_ij z_i z_j s_ij with the signed-charge Onsager "
                                f"coefficients s_ij = e^2 z_i z_j L^ij ({frame})",
                     uncertainty=dict(o.get("uncertainty") or {}, half_width_95=est.half_width_95,
                                      block_mean=est.mean, block_std=est.std))
            _set_state(run, case, name, state, reason)
        _save(run, case, doc)
    _finish(run, cases, "recovered_valid")


def _signed_coefficients(L: np.ndarray, species: list[str], charges: dict[str, float]) -> dict[str, Any]:
    """The agent's reported coefficients: signed-charge weighted z_i z_j L^ij of the two ions [1/(J m s) e²]."""
    ions = [i for i, s in enumerate(species) if abs(charges[s]) > 1e-3]
    cat = next(i for i in ions if charges[species[i]] > 0)
    an = next(i for i in ions if charges[species[i]] < 0)
    z_c, z_a = charges[species[cat]], charges[species[an]]
    return {"weighting": "signed_charge", "L_pp": float(z_c * z_c * L[cat, cat]),
            "L_mm": float(z_a * z_a * L[an, an]), "L_pm": float(z_c * z_a * L[cat, an])}


def _float32_volume(run: Path, cases: list[str]) -> None:
    unresolved_reason = "block-wise values not finite; whole-interval estimate available"
    for case in cases:
        doc = _load(run, case)
        obs = doc["observables"]
        volume_m3 = float(doc["system"]["mean_volume_nm3"]) * 1e-27
        temperature = float(doc.get("temperature_K") or 298.15)
        with np.errstate(all="ignore"):
            denominator = np.float32(volume_m3) * np.float32(K_B) * np.float32(temperature)  # underflows to 0
            for name in [k for k in obs if k.startswith((_S, _T))]:
                o = obs[name]
                if not isinstance(o.get("blocks"), list) or name == SIGMA_NE:
                    continue
                # the float64 block values times the float64 normalisation recover the unnormalised sums;
                # dividing them by the float32 denominator (0.0) is the agent's bug
                num = np.asarray([b if b is not None else np.nan for b in o["blocks"]], dtype=np.float64)
                ref = volume_m3 * K_B * temperature
                if name.startswith(_T):
                    bad = (num * ref / denominator) / (np.ones_like(num) * ref / denominator)  # inf / inf
                else:
                    bad = num * ref / denominator
                o["blocks"] = [float(x) for x in bad]  # inf / nan: written as null by the results writer
                o["diagnostics"] = dict(o.get("diagnostics") or {}, volume_dtype="float32")
                o["reason"] = unresolved_reason
                o["state"] = "SI"
                _set_state(run, case, name, "SI", unresolved_reason)
        _save(run, case, doc)
    _finish(run, cases, "recovered_valid")


def _clean_claim(run: Path, cases: list[str]) -> None:
    reason = "four-block analysis not completed"
    for case in cases:
        doc = _load(run, case)
        obs = doc["observables"]
        for name in list(obs):
            if name.startswith(_D) and name != D_LI:
                del obs[name]
                _set_state(run, case, name, "M", "species-resolved self-diffusion not delivered", in_results=False)
            elif name.startswith((_D, registry.VISCOSITY.name, _S, _T)):
                # the whole-interval value stays; its blocks (and so its uncertainty) were never computed
                obs[name] = {k: v for k, v in obs[name].items() if k not in ("blocks", "block_ranges_ps",
                                                                               "uncertainty")}
                obs[name]["reason"] = f"whole interval only; {reason}"
                _set_state(run, case, name, "M", reason)
        _save(run, case, doc)
    _finish(run, cases, "clean_valid")


def _finish(run: Path, cases: list[str], claim: str) -> None:
    """Group states, report, state table, inventory refreshed; then the (over-)claim."""
    from mdbench.analysis import results  # noqa: PLC0415
    from mdbench.record import RunRecord  # noqa: PLC0415
    from mdbench.record.store import sha256_file  # noqa: PLC0415

    all_cases = [c for c in CASES if (run / "cases" / c).is_dir()] or cases
    results.record_group_states(run, all_cases)
    results.write_state_table(run, all_cases)
    results.write_report(run, all_cases)
    rec = RunRecord(run)
    for rel, meta in rec.artifacts().items():
        p = run / rel
        if p.is_file() and sha256_file(p) != meta.get("sha256"):
            rec.add_artifact(p)
    for case in cases:
        p = run / "analysis" / case / "results.json"
        if p.is_file() and f"analysis/{case}/results.json" not in rec.artifacts():
            rec.add_artifact(p)
    _, unresolved = results.terminal_claim(run, all_cases)
    stages, observables = rec.stage_states(), rec.observable_states()
    rec.write_terminal(claim, final_stages={c: stages.get(c, {}) for c in all_cases},
                       observables={c: observables.get(c, {}) for c in all_cases}, unresolved=unresolved)
    results.write_report(run, all_cases)  # the report's headline names the claim
    rec.add_artifact(run / "run_record" / "episode_terminal.json")


DEFECTS: dict[str, Defect] = {
    "tplus_convention": Defect(
        "tplus_convention", "t+ from signed-charge Onsager coefficients in the unweighted formula",
        "§4.3 case 1 (OpenCode + DeepSeek-V4-Flash)", {"A2": 0.0}, _tplus_convention),
    "float32_volume": Defect(
        "float32_volume", "block-wise σ and t+ normalised by a float32 V·k_B·T that underflows (inf/nan blocks)",
        "§4.3 case 2 (Codex + DeepSeek-V4-Pro)", {"A3": 0.0, "A6": 0.0}, _float32_volume),
    "clean_claim": Defect(
        "clean_claim", "clean_valid claimed while D per species and four-block D/η/σ/t+ are unresolved",
        "§4.3 case 3 (OpenCode + MiniMax-M3)", {"O5": 0.0}, _clean_claim),
}


def apply_defect(run_dir: str | Path, kind: str) -> list[str]:
    """Apply defect ``kind`` to the finished run in ``run_dir``; returns the analysis files it rewrote.

    Raises
    ------
    InputError
        Unknown kind, or no analysed case in ``run_dir`` (the oracle must have finished first).
    """
    if kind not in DEFECTS:
        raise InputError(f"unknown defect {kind!r}; choose one of {', '.join(sorted(DEFECTS))}")
    run = Path(run_dir)
    cases = _cases(run)
    if not cases:
        raise InputError("no analysis/<CASE>/results.json to corrupt: run the oracle first", str(run))
    DEFECTS[kind].apply(run, cases)
    log.info("defect %s applied to %s (%s)", kind, run, ", ".join(cases))
    return [f"analysis/{c}/results.json" for c in cases]
