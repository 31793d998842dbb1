"""Harbor's own linter on the suite, and verifiers that never lean on the reference solutions.

`harbor lint` (Harbor 0.26.0 in .venv-harbor) with its default rules must pass on every task — a maintainer who
puts it in CI sees no failure. Skipped, saying how to enable it, where .venv-harbor is missing:
`make harbor-env` (or set MDBENCH_HARBOR_PYTHON).
"""

from __future__ import annotations

import ast
import re

import pytest

from mdbench.arena.task import TASKS_DIR, list_tasks

TASKS = list_tasks(TASKS_DIR)


def test_harbor_lint_default_rules_pass_on_every_task(harbor_env):
    from mdbench.arena.harbor_compat import harbor_lint

    rc, findings = harbor_lint(*(t.path for t in TASKS))
    assert (rc, findings) == (0, [])


def test_harbor_lint_all_rules_leave_only_the_local_base_image(harbor_env):
    """With ``--select ALL`` the one remaining finding is the FROM of the suite's own local base image (built
    from templates/arena/base.Dockerfile, never pulled from a registry, so it has no registry digest; a
    maintainer who pushed it pins it with `mdbench arena pin-base`, tested below)."""
    from mdbench.arena.harbor_compat import harbor_lint

    _, findings = harbor_lint(*(t.path for t in TASKS), select=("ALL",))
    assert {f["rule"] for f in findings} <= {"unpinned-image"}
    assert all(f["path"].endswith("environment/Dockerfile") for f in findings)


#: A digest-pinned reference of a pushed base image (the digest is syntactic: no registry is reached here).
PUSHED = "ghcr.io/example/mdbench-arena-base:0.2@sha256:" + "1f" * 32


def test_pin_base_pins_every_task_so_harbor_lint_all_rules_pass(harbor_env, tmp_path):
    """`mdbench arena pin-base REF` on a copy of the suite: every FROM names the pushed digest, `harbor lint
    --select ALL` is clean, our own suite rules still accept the tasks and the host plug-in still builds them;
    a reference without a digest or of another image is refused in one line and changes nothing."""
    import shutil
    import subprocess
    import sys

    from click.testing import CliRunner

    from mdbench.arena.harbor_compat import harbor_lint
    from mdbench.arena.staging import base_image
    from mdbench.arena.task import validate_task
    from mdbench.cli import cli

    suite = tmp_path / "tasks"
    shutil.copytree(TASKS_DIR, suite)
    before = {p: p.read_bytes() for p in suite.glob("*/environment/Dockerfile")}
    for bad in ("mdbench-arena-base:0.2", "ghcr.io/example/python:3.11@sha256:" + "1f" * 32,
                "mdbench-arena-base:0.1@sha256:" + "1f" * 32):
        proc = subprocess.run([sys.executable, "-m", "mdbench.cli", "arena", "pin-base", bad, str(suite)],
                              capture_output=True, text=True, timeout=300)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(err) == 1 and "not a digest-pinned reference" in err[0], proc.stderr
    assert {p: p.read_bytes() for p in before} == before
    out = CliRunner().invoke(cli, ["arena", "pin-base", PUSHED, str(suite)])
    assert out.exit_code == 0 and f"{len(TASKS)} Dockerfile(s) now FROM {PUSHED}" in out.output, out.output
    assert {base_image(p) for p in before} == {PUSHED}
    rc, findings = harbor_lint(*sorted(p.parent.parent for p in before), select=("ALL",))
    assert (rc, findings) == (0, [])
    assert not [pr for t in sorted(p.parent.parent for p in before) for pr in validate_task(t, rules=("suite",))]
    again = CliRunner().invoke(cli, ["arena", "pin-base", PUSHED, str(suite)])   # idempotent
    assert again.exit_code == 0 and "0 Dockerfile(s)" in again.output


def test_cli_validate_with_harbor_runs_harbors_linter(harbor_env, tmp_path):
    """A task whose verifier shares the agent's sandbox passes our schema's Harbor rules but not `harbor lint`:
    `mdbench arena validate --with-harbor` reports Harbor's rule by name."""
    import shutil

    from click.testing import CliRunner

    from mdbench.cli import cli

    task = tmp_path / "cutoff-minimum-image"
    shutil.copytree(TASKS_DIR / "cutoff-minimum-image", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('environment_mode = "separate"\n', ""))
    out = CliRunner().invoke(cli, ["arena", "validate", "--rules", "harbor", "--with-harbor", str(task)])
    assert out.exit_code == 1 and "lint shared-verifier" in out.output, out.output


# --- verifiers independent of the solutions ------------------------------------------------------------------

def _code_lines(text: str) -> list[str]:
    """Normalised non-trivial code lines (comments, blank lines, imports and very short lines dropped)."""
    out = []
    for line in text.splitlines():
        s = re.sub(r"\s+", " ", line.split("#", 1)[0]).strip()
        if len(s) < 30 or s.startswith(("import ", "from ", "def main", "if __name__")):
            continue
        out.append(s)
    return out


def _functions(tree: ast.AST) -> dict[str, str]:
    return {n.name: ast.dump(ast.Module(body=n.body, type_ignores=[]))
            for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("task", TASKS, ids=[t.short_name for t in TASKS])
def test_verifier_neither_imports_nor_copies_the_solution(task):
    """No file of tests/ imports, opens or runs anything from solution/, and no verifier shares a function body
    or a run of three non-trivial code lines with the reference solution: the grader checks against the
    generator's truth or an independent formula, never against the solution's own code."""
    sol_files = sorted((task.path / "solution").glob("*.py"))
    sol_lines = [_code_lines(p.read_text()) for p in sol_files]
    sol_funcs = {}
    for p in sol_files:
        sol_funcs.update(_functions(ast.parse(p.read_text())))
    for test_file in sorted((task.path / "tests").iterdir()):
        if not test_file.is_file():
            continue
        text = test_file.read_text(errors="replace")
        assert not re.search(r"\bsolution\b|\bsolve(\.py|\.sh)?\b|/solution|ARENA_SOLUTION_DIR", text), \
            f"{test_file} refers to the solution"
        if test_file.suffix != ".py":
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                assert not any("solve" in n or "solution" in n for n in names), f"{test_file} imports {names}"
        shared = {name for name, body in _functions(tree).items() if body in sol_funcs.values()}
        assert not shared, f"{test_file} copies solution function bodies: {sorted(shared)}"
        mine = _code_lines(text)
        windows = {tuple(mine[i:i + 3]) for i in range(len(mine) - 2)}
        for lines in sol_lines:
            common = [w for w in (tuple(lines[i:i + 3]) for i in range(len(lines) - 2)) if w in windows]
            assert not common, f"{test_file} copies solution code: {common[0]}"


# --- what the Docker images are built from -------------------------------------------------------------------

def test_base_image_pins_every_python_dependency_and_its_context_is_minimal():
    from mdbench.paths import PROJECT_ROOT

    docker = (PROJECT_ROOT / "templates/arena/base.Dockerfile").read_text()
    assert "pip install --no-cache-dir -c /opt/mdbench/constraints.txt /opt/mdbench" in docker
    assert re.search(r"^FROM python:3\.11\.13-slim-bookworm@sha256:[0-9a-f]{64}$", docker, re.M)   # pinned base
    pins = [line for line in (PROJECT_ROOT / "templates/arena/constraints.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-!]+", p) for p in pins), \
        [p for p in pins if "==" not in p]
    ignore = [l for l in (PROJECT_ROOT / ".dockerignore").read_text().splitlines() if l and not l.startswith("#")]
    assert ignore[0] == "**"                                   # everything out, then an allow-list
    allowed = [l[1:] for l in ignore if l.startswith("!")]
    assert not any(a.startswith((".venv", ".git", "tests", "outputs", "templates/arena/tasks")) for a in allowed)
    assert {"pyproject.toml", "lib/", "params/", "templates/arena/constraints.txt"} <= set(allowed)
