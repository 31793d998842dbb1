"""Defaults live in ``params/analysis/`` only: no analysis function carries a registered threshold (a 95 %
precision bound, the block-trend alpha, the structure ranges, the β window …) as a literal keyword default. A
threshold left ``None`` is the registered setting (:func:`mdbench.analysis.settings.registered`), so a value
changed in the YAML reaches every caller — the audit's re-fits included."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mdbench.analysis import settings as settings_mod
from mdbench.analysis.settings import AnalysisSettings, registered
from _testseed import seed_for

LIB = Path(__file__).resolve().parents[2] / "lib" / "mdbench"
#: Keyword names of registered thresholds besides the settings' own field names (``guard_ps`` is left out:
#: its numeric default 0.0 means "no guard", not the registered automatic rule).
ALIASES = {"max_relative_half_width", "max_rel_half_width", "trend_alpha", "beta_range", "min_window_decades",
           "max_lag_fraction", "tolerance_ps", "min_frames_per_tau", "fraction_max_half_width",
           "t_plus_max_abs_half_width", "ionicity_max_abs_half_width"}
#: Literal defaults still to be moved to params/ (file:function:keyword); may only shrink.
KNOWN: set[str] = set()


def _literal_threshold_defaults() -> set[str]:
    names = ({f.name for f in dataclasses.fields(AnalysisSettings)} | ALIASES) - {"guard_ps"}
    found = set()
    for f in sorted((LIB / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            for arg, default in pairs:
                literal = (isinstance(default, ast.Tuple)
                           or (isinstance(default, ast.Constant) and default.value is not None))
                if arg.arg in names and literal:
                    found.add(f"{f.relative_to(LIB).as_posix()}:{node.name}:{arg.arg}")
    return found


def test_no_registered_threshold_is_a_literal_keyword_default():
    found = _literal_threshold_defaults()
    assert found <= KNOWN, f"literal defaults of registered settings (take None, read params/): {sorted(found - KNOWN)}"
    assert not KNOWN - found, f"fixed, remove from KNOWN: {sorted(KNOWN - found)}"


def test_a_threshold_left_none_follows_the_yaml(monkeypatch):
    """The value reaches the library functions from params/ (patched here as the YAML would change it)."""
    from mdbench.analysis.diffusion import self_diffusion

    values = dict(settings_mod._default_values())
    assert registered(None, "diffusion_max_rel_half_width") == values["diffusion_max_rel_half_width"]
    assert registered(0.5, "diffusion_max_rel_half_width") == 0.5
    with pytest.raises(KeyError):
        registered(None, "no_such_setting")
    x = np.random.default_rng(seed_for("defaults-in-params")).normal(scale=0.05, size=(800, 6, 3)).cumsum(axis=0)
    t = np.arange(800.0)

    def precise(**kw) -> bool:
        return self_diffusion(x, t, **kw).state_inputs()["sampling_checks"]["block_precision"]

    assert precise(max_relative_half_width=1e9) and not precise(max_relative_half_width=1e-9)
    monkeypatch.setattr(settings_mod, "_default_values", lambda: {**values, "diffusion_max_rel_half_width": 1e-9})
    assert not precise()  # None: the (patched) YAML value, not a literal of the library
    monkeypatch.setattr(settings_mod, "_default_values", lambda: {**values, "diffusion_max_rel_half_width": 1e9})
    assert precise()
