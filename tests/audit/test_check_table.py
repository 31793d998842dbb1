"""The one check table (audit/codes.RULES): every code has one row, the docs are generated from it, every code
that lowers an item names a test that plants its defect, and call sites name only the code.

The planting tests of the check codes below use a hand-written foreign results file (no GROMACS needed): an
honest base and one planted defect per code; the item the row names drops, the other rows' items stay.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest
from test_codes_documented import emitted_codes

from mdbench.audit import ruledoc
from mdbench.audit.analysis_items import assess_case
from mdbench.audit.bundle import load_bundle
from mdbench.audit.codes import CODES, RULES
from mdbench.audit.model import CHECK_SEVERITIES, ITEMS
from mdbench.audit.runread import load_run
from mdbench.audit.safeio import RunFS
from mdbench.record import RunRecord

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / "lib" / "mdbench" / "audit"


def test_every_emitted_code_has_one_row_and_every_row_is_well_formed():
    missing = sorted(set(emitted_codes()) - set(RULES))
    assert not missing, f"codes the audit emits without a row in audit/codes.RULES: {missing}"
    for r in RULES.values():
        assert r.severity is None or r.severity in CHECK_SEVERITIES, r
        assert set(r.lowers) <= set(ITEMS) and all(v in (0.0, 0.5) for v in r.lowers.values()), r
        assert r.item is None or r.item in ITEMS, r
        assert r.rule and r.seed, f"{r.code}: rule and seed sentence required"
    assert CODES == {c: r.severity for c, r in RULES.items() if r.severity}


def test_docs_are_generated_from_the_table():
    assert (ROOT / "docs" / "saeo-rules.md").read_text(encoding="utf-8") == \
        ruledoc.rules_doc(ruledoc.RULES_DOC.read_text(encoding="utf-8")), \
        "docs/saeo-rules.md is stale: run python -m mdbench.audit.ruledoc"
    assert (ROOT / "docs" / "saeo-coverage.md").read_text(encoding="utf-8") == ruledoc.coverage_doc(), \
        "docs/saeo-coverage.md is stale: run python -m mdbench.audit.ruledoc"


def _test_functions(path: Path) -> dict[str, str]:
    src = path.read_text(encoding="utf-8")
    return {n.name: ast.get_source_segment(src, n) or "" for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_code_that_lowers_an_item_names_a_test_that_plants_it():
    untested = sorted(r.code for r in RULES.values() if r.lowers and not r.test)
    assert not untested, f"codes that lower an item without a planting test (RULES[...].test): {untested}"
    for r in RULES.values():
        if not r.test:
            continue
        path, _, name = r.test.partition("::")
        funcs = _test_functions(ROOT / path)
        assert name in funcs, f"{r.code}: {r.test} does not exist"
        # the test (or the planting table it is parametrised over) names the code
        assert r.code in funcs[name] or r.code in (ROOT / path).read_text(encoding="utf-8"), \
            f"{r.code}: {r.test} never names the code"


def test_call_sites_name_only_the_code():
    """No audit module gives a Check a literal severity, or a GroupCheck literal caps or a literal item: the row
    says them."""
    bad = []
    for f in sorted(AUDIT.glob("*.py")):
        if f.name in ("codes.py", "model.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name == "Check" and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[1], ast.Constant):
                bad.append(f"{f.name}:{node.lineno} Check({node.args[0].value!r}, {node.args[1].value!r}, …)")
            if name in ("Extra", "GroupCheck") and (len(node.args) > 2 or node.keywords):
                bad.append(f"{f.name}:{node.lineno} GroupCheck(…) with caps/item at the call site")
    assert not bad, bad


# ------------------------------------------------------------------ planting tests of the sampling codes
def _results() -> dict:
    unc = {"half_width_95": 0.1, "definition": "4 blocks, t(0.975, 3) s / 2"}
    thermo = {t: {"value": 1.0, "blocks": [1.0, 1.001, 0.999, 1.0], "uncertainty": unc}
              for t in ("temperature", "pressure", "potential_energy", "total_energy", "volume")}
    return {
        "thermodynamics": {"density": {"value": 1000.0, "blocks": [999.0, 1001.0, 1000.5, 999.5], "uncertainty": unc},
                           **thermo},
        "viscosity": {"value": 0.9, "blocks": [0.9, 0.91, 0.89, 0.9], "plateau": {"reached": True},
                      "uncertainty": unc, "ensemble": "NVT",
                      "diagnostics": {"sampling_checks": {"block_precision": True, "plateau": True}}},
    }


def _plant(obs: dict, code: str) -> str:
    """Plant the defect of ``code`` in ``obs`` (in place); returns the group it lands on."""
    v = obs["viscosity"]
    if code == "block_half_width":  # wide blocks, no checks of its own: the backstop's precision bound
        del v["diagnostics"]["sampling_checks"]
        v["blocks"] = [0.3, 1.5, 0.5, 1.3]
        return "viscosity"
    if code == "block_trend":  # tight blocks drifting steadily, no checks of its own: the backstop's trend test
        del v["diagnostics"]["sampling_checks"]
        v["blocks"] = [0.897, 0.899, 0.901, 0.903]
        return "viscosity"
    if code == "estimator_recorded_failure":
        v["diagnostics"]["failures"] = ["Green-Kubo integral diverged"]
        return "viscosity"
    if code == "four_block_analysis_missing":
        v["blocks"] = [0.9, 0.91]
        return "viscosity"
    if code == "run_regime_check_failed":
        v["diagnostics"]["sampling_checks"]["plateau"] = False
        return "viscosity"
    if code == "run_sampling_check_failed":
        v["diagnostics"]["sampling_checks"]["block_precision"] = False
        return "viscosity"
    if code == "nonfinite_value":
        v["value"] = float("inf")
        return "viscosity"
    if code == "value_withheld":  # a ratio whose denominator is consistent with zero: not estimable
        v.update(value=None, blocks=[None] * 4)
        v["diagnostics"]["not_estimable"] = "the denominator is consistent with zero"
        return "viscosity"
    if code == "window_too_short":
        v.update(value=None, blocks=[None] * 4)
        v["diagnostics"]["too_short"] = "the production is shorter than the Green-Kubo window"
        return "viscosity"
    raise AssertionError(code)


def _assess(tmp_path: Path, obs: dict) -> tuple[dict, dict]:
    run = tmp_path / "run"
    RunRecord(run).set_stage_state("W", "production", "valid", "fixture")
    (run / "analysis" / "W").mkdir(parents=True)
    (run / "analysis" / "W" / "results.json").write_text(json.dumps({"observables": obs}))
    js, groups = assess_case(load_run(RunFS(run)), load_bundle(None), "W", None, None)
    return ({g.assessment.observable: g.assessment for g in groups},
            {(j.item, j.observable): j.rating for j in js})


PLANTED = ("block_half_width", "block_trend", "estimator_recorded_failure", "four_block_analysis_missing",
           "run_regime_check_failed", "run_sampling_check_failed", "window_too_short", "nonfinite_value",
           "value_withheld")


@pytest.mark.parametrize("code", PLANTED)
def test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names(tmp_path, code):
    base_by, base = _assess(tmp_path / "base", _results())
    obs = copy.deepcopy(_results())
    group = _plant(obs, code)
    by, got = _assess(tmp_path / "planted", obs)
    codes = {c.code for c in by[group].checks}
    assert code in codes, (code, codes)
    assert code not in {c.code for c in base_by[group].checks}
    for item, cap in RULES[code].lowers.items():
        assert base[(item, group)] == 1.0, (item, group, base[(item, group)])
        assert got[(item, group)] is not None and got[(item, group)] <= cap, (item, got[(item, group)])


def test_planting_table_names_every_code_it_plants():
    for code in PLANTED:
        assert RULES[code].test.endswith("test_planted_sampling_and_numeric_defect_lowers_the_item_its_row_names")
