"""Sim1/Sim4 from the production run input, parameter by parameter, against the frozen protocol (issue 45).

The physics a production ran with is in its ``.tpr``, not in the ``.mdp`` a run keeps beside it: the run
input is read with ``gmx dump -s`` (a reader; its ``inputrec`` header, from the one dump of the run input the
force-field checks read too: :func:`mdbench.audit.gmx_dump.tpr_dump`) and every physics-relevant parameter
of :file:`params/audit/protocol_tolerances.yaml` is compared with the frozen protocol of the case:

* the bundle's ``protocols/production.yaml`` (the engine's protocol format, ``extends`` resolved in the
  bundle), else
* the project's ``params/protocols/production.yaml`` with the preset the bundle's case files name (cut-offs,
  time step and output intervals of :mod:`mdbench.engine.stages`, the engine's own merge); its ``npt_mdp``
  makes an NPT production an admissible choice;
* no frozen protocol: nothing is compared (the docs list it as a limit).

A difference that changes the model (non-bonded treatment, PME, constraints) is ``protocol_model_differs``
(Sim1 = 0); one that changes the state point or dynamics (integrator, dt, thermostat/barostat, targets, τ,
compressibility, ensemble) ``protocol_state_point_differs`` (Sim4 = 0); an output interval coarser than the
protocol's ``protocol_output_coarser`` (Sim4 ≤ ½). Each message gives both values. Molecule counts and
order are Sim1's (:func:`mdbench.audit.simulation.check_setup`), every charge and LJ parameter the frozen
force field's (:mod:`mdbench.audit.frozen_ff`). Cost: no ``gmx dump`` of its own (the header of the dump the
force-field checks run, prefetched beside the reanalysis).
"""

from __future__ import annotations

import logging
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from mdbench.audit import codes
from mdbench.audit.codes import CODES
from mdbench.audit.gmx_dump import tpr_dump
from mdbench.audit.model import Check, Evidence, Finding, Judgment, cap
from mdbench.engine.protocols import load_protocol, mdp_options
from mdbench.engine.stages import cutoff_overrides, load_preset, preset_timing
from mdbench.paths import PARAMS_DIR
from mdbench.yamlio import load_yaml

log = logging.getLogger(__name__)

TOLERANCES = PARAMS_DIR / "audit" / "protocol_tolerances.yaml"
#: The codes of this check, in the order their findings are reported (items and caps: their rows in ``codes.RULES``).
CODES_ORDER = ("protocol_model_differs", "protocol_state_point_differs", "protocol_output_coarser")


@lru_cache(maxsize=1)
def tolerances() -> dict[str, dict[str, Any]]:
    """The parameter table of :data:`TOLERANCES` (keys lower case)."""
    data = load_yaml(TOLERANCES)
    return {str(k).lower(): dict(v) for k, v in (data.get("parameters") or {}).items()}


def dump_inputrec(run: Any, rel: str) -> dict[str, Any]:
    """The ``inputrec`` header of a run input (:func:`mdbench.audit.gmx_dump.parse_inputrec` of its one
    ``gmx dump -s`` per audit); empty when GROMACS is unavailable or the file is not a regular file inside
    the run."""
    return tpr_dump(run, rel).inputrec


def _norm_key(k: str) -> str:
    k = str(k).lower().replace("_", "-")
    return {"vdwtype": "vdw-type", "dispcorr": "dispcorr"}.get(k, k)


def frozen_protocol(bundle: Any, case: str) -> tuple[list[dict[str, Any]], str] | None:
    """The admissible production option sets of ``case`` (NVT and, where the protocol offers it, NPT; keys
    normalised) and where they come from; None when the bundle freezes no protocol."""
    root = getattr(bundle, "root", None)
    if root is None:
        return None
    try:
        if (Path(root) / "protocols" / "production.yaml").is_file():
            prot = load_protocol("production", Path(root) / "protocols")
            overrides: dict[str, Any] = {}
            tm = prot.timing
            source = "bundle:protocols/production.yaml"
        else:
            preset = _bundle_preset(bundle, case)
            if preset is None:
                return None
            prot = load_protocol("production")
            overrides, tm = preset_production(prot, load_preset(preset))
            source = f"params/protocols/production.yaml + preset {preset}"
        sets = [mdp_options(prot, overrides, timing=tm)]
        if prot.raw.get("npt_mdp"):
            sets.append(mdp_options(prot, {**overrides, **prot.raw["npt_mdp"]}, timing=tm))
    except Exception as exc:  # noqa: BLE001 - a protocol that does not load: nothing to compare against
        log.info("frozen protocol of %s not loaded: %s", case, exc)
        return None
    return [{_norm_key(k): v for k, v in s.items()} for s in sets], source


def preset_production(prot: Any, preset: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(mdp overrides, timing) of a production under a preset: the engine's own merge
    (:func:`mdbench.engine.stages.cutoff_overrides`, :func:`~mdbench.engine.stages.preset_timing`)."""
    return cutoff_overrides(preset), preset_timing(prot, preset, "production_ps", None)


def _bundle_preset(bundle: Any, case: str) -> str | None:
    cdef = bundle.cases.get(case)
    if cdef is None or not cdef.source:
        return None
    try:
        data = load_yaml(Path(bundle.root) / cdef.source)
    except Exception:  # noqa: BLE001
        return None
    preset = data.get("preset") if isinstance(data, dict) else None
    return str(preset) if isinstance(preset, str) and re.fullmatch(r"[A-Za-z0-9_-]+", preset) else None


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    s = str(v).strip().lower()
    return {"false": "no", "true": "yes"}.get(s, s)


def _floats(v: Any) -> list[float] | None:
    try:
        if isinstance(v, (list, tuple)):
            return [float(x) for x in v]
        return [float(x) for x in str(v).split()]
    except (TypeError, ValueError):
        return None


def differences(got: dict[str, Any], want: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(code, parameter, message with both values) for each difference the table does not allow."""
    out: list[tuple[str, str, str]] = []
    dt_got, dt_want = (_floats(got.get("dt")) or [math.nan])[0], (_floats(want.get("dt", 0.001)) or [math.nan])[0]
    barostat = _text(want.get("pcoupl", "no")) != "no"
    for name, rule in tolerances().items():
        keys = [_norm_key(k) for k in rule.get("mdp", [name])]
        w = next((want[k] for k in keys if k in want), rule.get("default"))
        g = got.get(name)
        if w is None or g is None or (rule.get("barostat") and not barostat):
            continue
        code = "protocol_model_differs" if rule.get("item") == "Sim1" else "protocol_state_point_differs"
        kind = rule.get("rule")
        if kind == "equal" and _text(g) != _text(w):
            out.append((code, name, f"{name} = {g} in the production run input, {w} in the frozen protocol"))
        elif kind == "number":
            gv, wv = _floats(g), _floats(w)
            if gv is None or wv is None or not gv:
                continue
            wv = wv * len(gv) if len(wv) == 1 else wv
            rel = float(rule.get("rel", 1e-6))
            if len(gv) != len(wv) or any(abs(a - b) > rel * max(abs(a), abs(b), 1e-12) for a, b in zip(gv, wv)):
                out.append((code, name, f"{name} = {' '.join(f'{x:g}' for x in gv)} in the production run input, "
                                        f"{' '.join(f'{x:g}' for x in wv)} in the frozen protocol"))
        elif kind == "not_coarser":
            gv, wv = (_floats(g) or [math.nan])[0], (_floats(w) or [math.nan])[0]
            if name.startswith("nst"):  # an interval in steps: compared in ps
                gv, wv, unit = gv * dt_got, wv * dt_want, "ps"
                if gv <= 0 < wv:
                    gv = math.inf   # 0: never written
            else:
                unit = "nm"
            if math.isfinite(wv) and gv > wv * (1 + 1e-6):
                code = "protocol_output_coarser" if name.startswith("nst") else code
                out.append((code, name, f"{name}: every {gv:g} {unit} in the production run input, the frozen "
                                     f"protocol every {wv:g} {unit} (coarser)"))
    return out


def checks(run: Any, bundle: Any, case: str, pf: Any) -> list[Check]:
    """The protocol checks of a case's production run input (empty when nothing can be compared)."""
    if pf is None or getattr(pf, "tpr", None) is None:
        return []
    frozen = frozen_protocol(bundle, case)
    if frozen is None:
        return []
    sets, source = frozen
    got = dump_inputrec(run, pf.tpr)
    if not got:
        return []
    # the admissible set the run chose (NVT or NPT), by its barostat; else the default ensemble
    pick = next((s for s in sets if _text(s.get("pcoupl", "no")) == _text(got.get("pcoupl", "no"))), sets[0])
    return [Check(code, CODES[code], msg, (Evidence(pf.tpr, key=name, note=f"gmx dump -s; frozen: {source}"),))
            for code, name, msg in differences(got, pick)]


def apply(run: Any, bundle: Any, case: str, pf: Any, judgments: list[Judgment]) -> list[Finding]:
    """Sim1/Sim4 of ``case`` capped by its protocol checks (``judgments`` amended in place); the findings."""
    found = checks(run, bundle, case, pf)
    findings: list[Finding] = []
    for code in CODES_ORDER:
        item = codes.rule(code).item
        rating = codes.rule(code).lowers[item]
        msgs = [c.message for c in found if c.code == code]
        if not msgs:
            continue  # one finding per code and run input (findings are de-duplicated by location)
        findings.append(Finding(code, "; ".join(msgs)[:900], pf.tpr, item=item, case=case))
        for i, j in enumerate(judgments):
            if j.item == item and j.case == case and j.observable is None:
                judgments[i] = cap(j, rating, "production run input unlike the frozen protocol: " + "; ".join(msgs))
                judgments[i].evidence.extend(c.evidence[0] for c in found if c.code == code)
    return findings
