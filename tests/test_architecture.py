"""The shape of the code: rooms without cycles, the linter, the doctests, short functions.

* **Rooms** (``lib/mdbench/<room>/``) import each other in one direction only: no two rooms import each
  other (modules below every room — ``mdbench.errors``, ``mdbench.threads``, ``mdbench.observable_states``,
  ``mdbench.untrusted`` … — are not rooms), and no room imports another room's private (``_name``) names.
  The pairs and names in :data:`KNOWN_CYCLES` / :data:`KNOWN_PRIVATE` are the ones left, each with the move
  that removes it; the lists may only shrink.
* **ruff** (``[tool.ruff]`` in pyproject.toml) passes on ``lib`` and ``tests``.
* **doctests**: every module of :data:`DOCTEST_ROOMS` with a ``>>>`` example runs it, and the numerics modules named in
  :data:`MUST_HAVE_EXAMPLES` have at least one.
* **plain imports of our own modules in tests** (an import error must fail, not skip): no
  ``importorskip("mdbench…")`` outside :data:`KNOWN_IMPORTORSKIP` (other rooms' tests; may only shrink).
* **no import circle between files** (function-local imports included): the circles of
  :data:`KNOWN_CIRCLES` (empty: the seven of 57d1c2f are broken) may only shrink, and the count of
  function-local imports marked ``noqa: PLC0415`` may only go down (:data:`LAZY_IMPORTS_AT_MOST`; a lazy import
  is kept for start-up time, with its reason on the line).
* **no function over 80 lines** outside :data:`NUMERICS_EXCEPTIONS` (numerics kernels kept one piece, each
  with its reason) and :data:`LONG_FUNCTIONS` (other rooms' functions still to be split; may only shrink).
"""

from __future__ import annotations

import ast
import doctest
import importlib
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "mdbench"

#: Two-way room pairs still to be untangled: pair → the move that removes it.
KNOWN_CYCLES: dict[tuple[str, str], str] = {}
#: Private names imported across rooms: (importing file, module, name) → the fix.
KNOWN_PRIVATE: dict[tuple[str, str, str], str] = {}
#: Tests that still skip on an import error of our own modules: file → count (their owners' to replace).
KNOWN_IMPORTORSKIP: dict[str, int] = {}
#: Rooms whose doctests run here: every room with a ``>>>`` example (and the modules below every room).
DOCTEST_ROOMS = ("analysis", "arena", "audit", "llm", "record")
#: Numerics modules that teach with runnable examples.
MUST_HAVE_EXAMPLES = ("mdbench.audit.rulebook", "mdbench.analysis.speciation", "mdbench.analysis.msd")
#: Numerics kernels over 80 lines that stay one piece (file:function → why). Each is one formula carried out
#: end to end, with its docstring giving the math; splitting it would scatter one derivation over several
#: functions. docs/architecture.md ("Rooms without cycles") names this table.
NUMERICS_EXCEPTIONS = {
    "analysis/msd.py:msd_fft_windows": "the FFT MSD of several windows in one memory pass: the per-coordinate "
                                       "transpose, the chunked FFT autocorrelation and the S1 running sums share "
                                       "one set of buffers (the costliest pass of the analysis)",
    "analysis/diffusion.py:self_diffusion": "D = MSD slope / 6 with its fit window, beta check and block "
                                            "estimate: one derivation (the docstring's math) over shared lags",
    "analysis/onsager.py:onsager_transport": "the Onsager coefficients, sigma, sigma_NE, ionicity and t+ in "
                                             "both conventions from one set of displacement MSDs and "
                                             "cross-correlations (one derivation, shared intermediate sums)",
    "analysis/viscosity.py:green_kubo_viscosity": "the Green–Kubo integral of the pressure-tensor "
                                                  "autocorrelation, its plateau and its block estimate over "
                                                  "the same running integrals",
}
#: Functions over 80 lines still to be split (file:function); may only shrink.
LONG_FUNCTIONS: set[str] = set()


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mdbench" or len(parts) < 2:
        return None
    return parts[1] if (LIB / parts[1]).is_dir() else None


def _modules() -> list[tuple[Path, str]]:
    out = []
    for f in sorted(LIB.rglob("*.py")):
        rel = f.relative_to(LIB.parent).with_suffix("")
        out.append((f, ".".join(rel.parts).removesuffix(".__init__")))
    return out


def _imports() -> tuple[dict[tuple[str, str], set[str]], set[tuple[str, str, str]]]:
    """(room pair a→b → files, private names imported across rooms) of every import, function-local included."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    private: set[tuple[str, str, str]] = set()
    for f, module in _modules():
        room = _room(module)
        if room is None:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [(node.module, [a.name for a in node.names])]
            elif isinstance(node, ast.Import):
                found = [(a.name, []) for a in node.names]
            else:
                continue
            for target, names in found:
                other = _room(target)
                if other is None or other == room:
                    continue
                rel = str(f.relative_to(ROOT))
                edges[(room, other)].add(rel)
                private |= {(rel, target, n) for n in names if n.startswith("_")}
    return edges, private


def test_no_two_rooms_import_each_other():
    edges, _ = _imports()
    cycles = {tuple(sorted(pair)): sorted(edges[pair] | edges[pair[::-1]])
              for pair in edges if pair[::-1] in edges}
    new = {pair: files for pair, files in cycles.items() if pair not in KNOWN_CYCLES}
    assert not new, f"two-way room imports (move the shared piece below both rooms): {new}"
    assert set(KNOWN_CYCLES) <= set(cycles), f"resolved, remove from KNOWN_CYCLES: {set(KNOWN_CYCLES) - set(cycles)}"


#: File-level import circles still to be broken (function-local imports included), each in its own room:
#: modules of one circle (a strongly connected component of the import graph). May only shrink.
KNOWN_CIRCLES: list[frozenset[str]] = []
#: Function-local imports marked ``noqa: PLC0415`` in lib/ (182 at 57d1c2f, 173 once the analysis, arena, llm and
#: report rooms lost theirs that hid nothing; 165 once the audit's and the engine's went too); may only go down.
LAZY_IMPORTS_AT_MOST = 155


def _module_graph() -> dict[str, set[str]]:
    """Module → the modules of lib/mdbench it imports anywhere in its file (function-local imports included;
    ``from package import name`` counts as importing the submodule when ``name`` is one, else the package)."""
    modules = {module: f for f, module in _modules()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, f in modules.items():
        package = module if f.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}" if base else up
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != module:
                    graph[module].add(t)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        circles.append(frozenset(comp))
    return circles


def test_import_circles_finds_a_circle_through_a_function_local_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [frozenset("abc")]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_files():
    circles = import_circles(_module_graph())
    new = [sorted(c) for c in circles if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, ("import circles between files (move the shared piece to the module both sides already "
                     f"depend on): {new}")
    gone = [sorted(k) for k in KNOWN_CIRCLES if not any(c <= k for c in circles)]
    assert not gone, f"broken, remove from KNOWN_CIRCLES: {gone}"


def test_function_local_imports_only_go_down():
    n = sum(len(re.findall(r"noqa:[^\n]*\bPLC0415", f.read_text(encoding="utf-8"))) for f, _module in _modules())
    assert n <= LAZY_IMPORTS_AT_MOST, (f"{n} function-local imports marked noqa: PLC0415 (at most "
                                       f"{LAZY_IMPORTS_AT_MOST}): import at the top, or say why it is lazy")


def test_no_private_name_is_imported_across_rooms():
    _, private = _imports()
    assert private <= set(KNOWN_PRIVATE), f"private names imported across rooms: {private - set(KNOWN_PRIVATE)}"


def test_the_analysis_and_the_executors_do_not_import_the_engine_for_the_thread_cap():
    edges, _ = _imports()
    assert ("analysis", "engine") not in edges and ("execute", "engine") not in edges
    assert ("record", "analysis") not in edges  # the state vocabulary is below every room


def test_ruff_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    proc = subprocess.run([ruff, "check", "lib", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_doctests_of_the_library_run():
    tested = {}
    for f, module in _modules():
        if ">>> " not in f.read_text(encoding="utf-8"):
            continue
        assert _room(module) in (*DOCTEST_ROOMS, None), f"{module} has examples: add its room to DOCTEST_ROOMS"
        result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{module}: {result.failed} doctest(s) failed (run pytest --doctest-modules {f})"
        tested[module] = result.attempted
    for module in MUST_HAVE_EXAMPLES:
        assert tested.get(module, 0) > 0, f"{module} has no runnable example"


def test_no_function_over_80_lines_outside_the_documented_list():
    long = set()
    for f, _module in _modules():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.add(f"{f.relative_to(LIB).as_posix()}:{node.name}")
    allowed = LONG_FUNCTIONS | set(NUMERICS_EXCEPTIONS)
    assert long <= allowed, f"functions over 80 lines (split them): {sorted(long - allowed)}"
    assert not allowed - long, f"now short, remove from LONG_FUNCTIONS/NUMERICS_EXCEPTIONS: {sorted(allowed - long)}"
    assert not LONG_FUNCTIONS & set(NUMERICS_EXCEPTIONS)


def test_the_numerics_exceptions_are_documented():
    """Each kept-long numerics kernel says why, and docs/architecture.md points to the table."""
    assert all(len(why) > 40 for why in NUMERICS_EXCEPTIONS.values())
    assert "NUMERICS_EXCEPTIONS" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_tests_import_our_own_modules_plainly():
    found = {}
    for f in sorted((ROOT / "tests").rglob("*.py")):
        n = f.read_text(encoding="utf-8").count('importorskip("mdbench')
        if n and f.name != Path(__file__).name:
            found[str(f.relative_to(ROOT))] = n
    grown = {k: v for k, v in found.items() if v > KNOWN_IMPORTORSKIP.get(k, 0)}
    assert not grown, f"importorskip of our own modules (import them plainly: an import error must fail): {grown}"


#: Helpers every room needs, defined once below every room (a second copy drifts).
DEFINED_ONCE = {"sha256_file": "hashing.py"}


def test_shared_helpers_are_defined_once():
    where = defaultdict(list)
    for f, _module in _modules():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in DEFINED_ONCE:
                where[node.name].append(f.relative_to(LIB).as_posix())
    assert dict(where) == {name: [home] for name, home in DEFINED_ONCE.items()}, dict(where)


#: A number with a unit, or a bare decimal fraction, in a template's prose: a parameter value copied from
#: params/ that drifts when the YAML changes (the prose names the setting instead).
_PARAMETER_VALUE = r"\d+(?:\.\d+)?\s*(?:nm|ps|ns|fs|K|bar|kJ|ns/case)\b|±\s*\d|\b0\.\d+\b"


def test_template_prose_names_parameters_without_repeating_their_values():
    import json

    found = []
    for f in sorted((ROOT / "templates").rglob("*.ipynb")):
        for cell in json.loads(f.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                found += [f"{f.relative_to(ROOT)}: {m.group(0)!r}" for m in re.finditer(_PARAMETER_VALUE, text)]
    assert not found, f"template markdown repeats parameter values (name the setting instead): {found}"


#: Literal collections of preset names outside their one place (mdbench/choices.py reads params/presets):
#: file → why it stays (per-preset data of another room; may only shrink).
KNOWN_PRESET_LISTS: dict[str, str] = {}


def _name_collections(names: set[str]) -> set[str]:
    """Files of lib/mdbench with a list/tuple/set/dict literal naming two or more of ``names``."""
    found = set()
    for f, _module in _modules():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            items = (node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set))
                     else node.keys if isinstance(node, ast.Dict) else [])
            hits = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
            if len(hits) >= 2:
                found.add(f.relative_to(LIB).as_posix())
    return found


def test_preset_and_executor_names_come_from_one_place_each():
    import click

    from mdbench.choices import EXECUTORS, executor_names, preset_names
    from mdbench.cli import COMMANDS, cli

    presets = set(preset_names())
    assert presets == {p.stem for p in (ROOT / "params" / "presets").glob("*.yaml")} and len(presets) >= 2
    assert _name_collections(presets) <= set(KNOWN_PRESET_LISTS), "a preset list outside mdbench/choices.py"
    assert _name_collections(set(EXECUTORS)) == {"choices.py"}, "an executor list outside mdbench/choices.py"
    # every CLI option named --preset / --executor offers exactly those names
    seen = defaultdict(int)

    def visit(cmd: click.Command) -> None:
        for param in cmd.params:
            if param.name in ("preset", "executor") and isinstance(param.type, click.Choice):
                expected = list(preset_names()) if param.name == "preset" else executor_names()
                assert list(param.type.choices) == expected, (cmd.name, param.name)
                seen[param.name] += 1
        for sub in getattr(cmd, "commands", {}).values():
            visit(sub)

    ctx = click.Context(cli)
    for name in COMMANDS:
        visit(cli.get_command(ctx, name))
    assert seen["preset"] >= 1 and seen["executor"] >= 2, dict(seen)


#: What the recipes of docs/architecture.md tell a new engineer to use: (module, attribute) and files.
RECIPE_NAMES = [("mdbench.analysis.estimator", "EstimatorBase"), ("mdbench.analysis.results", "template_frame"),
                ("mdbench.analysis.observables", "SPECIATION"), ("mdbench.analysis.observables", "REGISTRY"),
                ("mdbench.analysis.blocks", "block_estimate"), ("mdbench.analysis.adequacy", "adequacy_checks"),
                ("mdbench.analysis.states", "classify_observable"), ("mdbench.analysis.settings", "registered"),
                ("mdbench.audit.codes", "CODES"), ("mdbench.audit.analysis_items", "CODES"),
                ("mdbench.audit.analysis_items", "assess_group"), ("mdbench.audit.rulebook", "audit_state"),
                ("mdbench.audit.sampling", "analysis_settings"), ("mdbench.choices", "EXECUTORS"),
                ("mdbench.choices", "preset_names"), ("mdbench.execute.jobs", "run_local")]
RECIPE_FILES = ["lib/mdbench/analysis/speciation.py", "tests/analysis_registry/test_speciation.py",
                "tests/analysis_registry/test_audit_rulebook.py", "tests/analysis_registry/test_audit_checks.py",
                "tests/audit/_runbuilder.py", "tests/execute/test_executor.py", "docs/saeo-rules.md",
                "tests/analysis_registry/test_defaults_in_params.py"]


def test_the_recipes_of_the_architecture_page_name_what_exists():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for heading in ("## Recipe: add an observable", "## Recipe: add a SAEO rule", "## Recipe: add an executor"):
        assert heading in doc, heading
    for module, attr in RECIPE_NAMES:
        assert hasattr(importlib.import_module(module), attr), f"{module}.{attr} (named by docs/architecture.md)"
        assert attr in doc, f"docs/architecture.md no longer names {attr}: update RECIPE_NAMES"
    for rel in RECIPE_FILES:
        assert (ROOT / rel).is_file(), rel
        assert Path(rel).stem in doc, f"docs/architecture.md no longer names {rel}: update RECIPE_FILES"
