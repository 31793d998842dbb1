"""The observable registry is the one place that names observables, and every room reads it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mdbench.analysis import observables as registry
from mdbench.analysis.definitions import registration_definitions
from mdbench.analysis.settings import AnalysisSettings
from mdbench.paths import TEMPLATES_DIR

LIB = Path(registry.__file__).resolve().parents[1]


def _vocabulary() -> tuple[set[str], tuple[str, ...]]:
    """Strings that name an observable: family names, categories, audit groups; and name prefixes."""
    words = {e.name for e in registry.REGISTRY} | {e.category for e in registry.REGISTRY}
    words |= {g.name for g in registry.AUDIT_GROUPS}
    return words, tuple(e.name + "/" for e in registry.REGISTRY)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def places_naming_observables() -> list[str]:
    """``file:line: 'string'`` for every string literal outside the registry that names an observable."""
    words, prefixes = _vocabulary()
    hits = []
    for path in sorted(LIB.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                    and (node.value in words or node.value.startswith(prefixes))):
                hits.append(f"{path.relative_to(LIB.parent)}:{node.lineno}: {node.value!r}")
    return hits


def test_only_the_registry_names_observables():
    """A grep over lib/: no string literal outside analysis/observables.py is an observable's name, name
    prefix, results category or audit group (the registry module itself is where they live)."""
    hits = places_naming_observables()
    registry_file = f"{Path(registry.__file__).relative_to(LIB.parent)}:"
    assert any(h.startswith(registry_file) for h in hits), "the scan must find the registry's own names"
    outside = [h for h in hits if not h.startswith(registry_file)]
    assert outside == [], "observables named outside the registry:\n" + "\n".join(outside)


def test_every_entry_is_complete_and_consistent():
    groups = {g.name for g in registry.AUDIT_GROUPS}
    kinds = set(registration_definitions(AnalysisSettings()))
    names = [e.name for e in registry.REGISTRY]
    assert len(names) == len(set(names))
    for e in registry.REGISTRY:
        assert e.audit_group in groups, e.name
        assert e.registration in kinds, e.name
        assert e.unit and e.title and e.category
        module, _, cls = e.estimator.partition(":")
        estimator = getattr(__import__(module, fromlist=[cls]), cls)
        assert isinstance(estimator.inputs, tuple) and callable(estimator.run)
        assert (TEMPLATES_DIR / f"{e.template}.ipynb").is_file(), e.template
    assert {e.audit_group for e in registry.REGISTRY if e.required} == groups  # every seed group is delivered


def _estimator(e: registry.Observable) -> type:
    module, _, cls = e.estimator.partition(":")
    return getattr(__import__(module, fromlist=[cls]), cls)


def test_every_estimator_owns_its_definition_and_its_figure():
    """Each estimator's registration kind and figure come from its own hooks (``definition``, ``figures``), not
    from settings.py or results.py; the shared kinds keep the order a run registers them (registration ids)."""
    from mdbench.analysis.definitions import REGISTRATION_ORDER, shared_definitions
    from mdbench.analysis.estimator import EstimatorBase

    s = AnalysisSettings()
    kinds = list(registration_definitions(s))
    assert kinds[:len(REGISTRATION_ORDER)] == list(REGISTRATION_ORDER)
    shared = set(shared_definitions(s))
    for e in registry.REGISTRY:
        if e.registration not in shared:
            owners = [_estimator(o) for o in registry.REGISTRY if o.registration == e.registration]
            assert any(e.registration in o.definition(s) for o in owners), e.name
        if e.figure not in (None, registry.BLOCK_BARS_FIGURE):
            assert any(_estimator(o).figures is not EstimatorBase.figures
                       for o in registry.REGISTRY if o.figure == e.figure), e.name
    fitting = registration_definitions(s)["analysis_fitting_rules"]
    assert set(fitting) == {"diffusion", "onsager", "yeh_hummer", registry.VISCOSITY.name}
    for rel in ("analysis/settings.py", "analysis/results.py"):
        text = (LIB / rel).read_text(encoding="utf-8")
        assert not [k for k in kinds if f'"{k}"' in text], f"{rel} writes a registration kind"
        assert "plt.subplots" not in text, f"{rel} draws an observable's figure"


def test_lookups():
    assert registry.get("self_diffusion/LI") is registry.SELF_DIFFUSION
    assert registry.group_of("thermo/density") == "thermodynamics"
    assert registry.group_of("coordination/FSI:O@first_min") == "coordination"
    assert registry.group_of("transference/barycentric/unweighted_L") == "transference_number"
    assert registry.group_of("nonsense/x") is None and registry.family("nonsense") is None
    with pytest.raises(KeyError, match="not a registered observable"):
        registry.get("nonsense")
    assert registry.category_group("structure") == "coordination" == registry.category_group("rdf")
    assert registry.category_group("diffusion") == "self_diffusion"  # another tool's spelling
    assert registry.category_group("made_up") is None
    assert registry.targets("LHCE")["coordination"] == ["li_o_dmc_carbonyl", "li_o_fsi", "li_o_tte_ether"]
    assert registry.targets("W")["coordination"] == [] and registry.targets("W")["association"] == ["cip", "agg"]
    assert registry.template_categories("analysis/51_structure") == ("rdf", "structure", "speciation")
    assert registry.block_bar_names(["rdf/FSI:O", "coordination/FSI:O@first_min", "coordination/FSI:O@0.40nm",
                                     "conductivity/sigma", "conductivity/ionicity", "viscosity"]) == [
        "coordination/FSI:O@first_min", "conductivity/sigma", "viscosity"]


def test_the_study_runs_the_registry_templates():
    from mdbench.engine.commands import ANALYSIS_STAGES

    assert ANALYSIS_STAGES == registry.analysis_templates()
    assert set(ANALYSIS_STAGES) == {e.template for e in registry.REGISTRY}
    on_disk = {f"analysis/{p.stem}" for p in (TEMPLATES_DIR / "analysis").glob("*.ipynb")}
    assert on_disk == set(ANALYSIS_STAGES), "a template without a registry entry (or the reverse)"


def test_the_thermo_estimator_reads_the_registered_members():
    from mdbench.analysis.thermo import THERMO_TERMS

    assert tuple(THERMO_TERMS) == registry.THERMO.placeholders == registry.THERMO.targets_for("DE")


def test_unanalysable_names_cover_every_required_family():
    names = registry.unanalysable_names()
    assert {registry.get(n).audit_group for n in names} == {g.name for g in registry.AUDIT_GROUPS}
    assert "conductivity/sigma" in names and "thermo/volume" in names


def test_state_enums_agree_with_the_one_definition():
    """Adding a state (e.g. not_estimable) is one entry in mdbench.analysis.states.STATES; this test names the
    schemas and tables that must list it too."""
    import json

    from mdbench.analysis import states
    from mdbench.analysis.results import load_schema
    from mdbench.audit import model

    assert set(states.OBSERVABLE_STATES) == {s.name for s in states.STATES} == set(states.SEVERITY)
    assert load_schema()["$defs"]["observable"]["properties"]["state"]["enum"] == list(states.OBSERVABLE_STATES)
    assert tuple(model.OBSERVABLE_STATES) == states.OBSERVABLE_STATES
    saeo = json.loads((LIB / "audit" / "schemas" / "saeo.schema.json").read_text())
    enums = [v["enum"] for v in _find(saeo, "enum") if "SI" in v["enum"]]
    assert enums and all(set(e) - {None} == set(states.OBSERVABLE_STATES) for e in enums)


def _find(node, key):
    if isinstance(node, dict):
        if key in node:
            yield node
        for v in node.values():
            yield from _find(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _find(v, key)
