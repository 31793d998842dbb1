"""Simulation protocols: ``params/protocols/*.yaml`` → GROMACS ``.mdp`` files.

A protocol YAML has an ``mdp`` mapping (GROMACS option → value), an optional ``extends`` (another
protocol merged underneath) and a ``timing`` mapping in physical units that :func:`render_mdp`
converts to step counts:

.. math::

    n_\\mathrm{steps} = \\mathrm{round}(t_\\mathrm{length} / \\Delta t), \\qquad
    n_\\mathrm{energy} = n_\\mathrm{calcenergy} = \\mathrm{round}(t_\\mathrm{energy} / \\Delta t)

Energies (with the pressure tensor) are written every ``energy_interval_ps`` ≤ 0.5 ps with
``nstcalcenergy`` equal to ``nstenergy``, compressed coordinates every ``xtc_interval_ps``.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdbench.engine.cadence import CheckpointCadence
from mdbench.errors import InputError
from mdbench.paths import PARAMS_DIR
from mdbench.yamlio import load_yaml

PROTOCOLS_DIR = PARAMS_DIR / "protocols"

#: Largest energy output interval the contract allows [ps].
MAX_ENERGY_INTERVAL_PS = 0.5


@dataclass
class Timing:
    """Segment timing in physical units.

    Attributes
    ----------
    dt_fs : float
        Integration time step [fs].
    length_ps : float
        Segment length [ps] (0 for minimisation).
    energy_interval_ps, log_interval_ps, xtc_interval_ps : float
        Output intervals [ps].
    """

    dt_fs: float = 2.0
    length_ps: float = 0.0
    energy_interval_ps: float = 0.1
    log_interval_ps: float = 1.0
    xtc_interval_ps: float = 1.0

    @property
    def dt_ps(self) -> float:
        """Time step [ps]."""
        return self.dt_fs / 1000.0

    def steps(self, t_ps: float) -> int:
        """Number of steps in ``t_ps`` picoseconds (rounded to the nearest integer)."""
        return int(round(t_ps / self.dt_ps))

    @property
    def nsteps(self) -> int:
        """Steps in the segment."""
        return self.steps(self.length_ps)


@dataclass
class Protocol:
    """A loaded protocol: merged mdp options, timing and the files it came from (with sha256)."""

    name: str
    mdp: dict[str, Any]
    timing: Timing
    raw: dict[str, Any]
    sources: dict[str, str]

    @property
    def checkpoint_cadence(self) -> CheckpointCadence:
        """The checkpoint cadence (``checkpoint:`` block) that sets ``mdrun -cpt`` for each attempt."""
        return CheckpointCadence.from_mapping(self.raw.get("checkpoint"), next(iter(self.sources), self.name))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_protocol(name: str, protocols_dir: str | Path | None = None) -> Protocol:
    """Load protocol ``name`` (``params/protocols/<name>.yaml``), merging what it ``extends``.

    Raises
    ------
    InputError
        The file is missing or malformed (the message names the file).
    """
    pdir = Path(protocols_dir) if protocols_dir else PROTOCOLS_DIR
    path = pdir / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"protocol {name!r} not found; expected one of "
                         f"{sorted(p.stem for p in pdir.glob('*.yaml'))}", str(path))
    raw = load_yaml(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("mdp", {}), dict):
        raise InputError("a protocol must be a mapping with an `mdp:` mapping of GROMACS options", str(path))
    sources = {str(path): _sha256(path)}
    mdp: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    merged = dict(raw)
    if raw.get("extends"):
        base = load_protocol(str(raw["extends"]), pdir)
        mdp.update(base.mdp)
        timing.update(base.raw.get("timing") or {})
        sources.update(base.sources)
        for key, value in base.raw.items():
            merged.setdefault(key, value)
    mdp.update(raw.get("mdp") or {})
    timing.update(raw.get("timing") or {})
    merged["timing"] = timing
    try:
        tm = Timing(**{k: float(v) for k, v in timing.items()})
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad `timing:` entry ({exc}); allowed keys: dt_fs, length_ps, energy_interval_ps, "
                         "log_interval_ps, xtc_interval_ps (numbers)", str(path)) from exc
    return Protocol(name=name, mdp=mdp, timing=tm, raw=merged, sources=sources)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return " ".join(_fmt(v) for v in value)
    return str(value)


def mdp_options(protocol: Protocol, overrides: dict[str, Any] | None = None, *,
                timing: Timing | None = None, seed: int | None = None) -> dict[str, Any]:
    """The full option mapping of one segment: protocol mdp + steps from ``timing`` + ``overrides``.

    Raises
    ------
    InputError
        The energy interval exceeds 0.5 ps, or an interval is not a whole number of steps.
    """
    tm = timing or protocol.timing
    opts = dict(protocol.mdp)
    if opts.get("integrator", "md") in ("md", "sd", "md-vv"):
        where = next(iter(protocol.sources))
        if tm.energy_interval_ps > MAX_ENERGY_INTERVAL_PS:
            raise InputError(f"energy_interval_ps={tm.energy_interval_ps} exceeds "
                             f"{MAX_ENERGY_INTERVAL_PS} ps; lower it", where)
        for label, t in (("energy_interval_ps", tm.energy_interval_ps), ("xtc_interval_ps", tm.xtc_interval_ps),
                         ("log_interval_ps", tm.log_interval_ps)):
            n = t / tm.dt_ps
            if abs(n - round(n)) > 1e-6 or round(n) < 1:
                raise InputError(f"{label}={t} ps is not a whole number of {tm.dt_fs} fs steps", where)
        nen = tm.steps(tm.energy_interval_ps)
        opts.update({
            "dt": tm.dt_ps,
            "nsteps": tm.nsteps,
            "nstcalcenergy": nen,
            "nstenergy": nen,
            "nstlog": tm.steps(tm.log_interval_ps),
            "nstxout-compressed": tm.steps(tm.xtc_interval_ps),
            "nstxout": 0, "nstvout": 0, "nstfout": 0,
        })
        if seed is not None:
            opts["gen-seed"] = int(seed)
            opts["ld-seed"] = int(seed)  # the stochastic thermostat and barostat draw from it
    opts.update(overrides or {})
    return opts


def render_mdp(options: dict[str, Any], header: str = "") -> str:
    """Render an option mapping as ``.mdp`` text (one ``key = value`` per line, header as comments)."""
    lines = [f"; {ln}" for ln in header.splitlines()]
    width = max((len(k) for k in options), default=0)
    lines += [f"{k:<{width}} = {_fmt(v)}" for k, v in options.items()]
    return "\n".join(lines) + "\n"


def write_mdp(protocol: Protocol, path: str | Path, overrides: dict[str, Any] | None = None, *,
              timing: Timing | None = None, seed: int | None = None) -> dict[str, Any]:
    """Write the segment's ``.mdp`` to ``path`` and return the options written."""
    opts = mdp_options(protocol, overrides, timing=timing, seed=seed)
    header = (f"generated by mdbench.engine from protocol '{protocol.name}'\n"
              + "\n".join(f"source {p} sha256 {h}" for p, h in protocol.sources.items()))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(render_mdp(opts, header), encoding="utf-8")
    return opts


def load_gates(protocols_dir: str | Path | None = None) -> dict[str, Any]:
    """Load ``params/protocols/gates.yaml`` (gate thresholds)."""
    pdir = Path(protocols_dir) if protocols_dir else PROTOCOLS_DIR
    path = pdir / "gates.yaml"
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise InputError("gates.yaml must be a mapping of stage → thresholds", str(path))
    return copy.deepcopy(data)
