"""CLI end to end on the small parameter set, notebook hygiene (the HTML page: test_leaderboard_page.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from mdbench.errors import InputError
from mdbench.sdl.commands import sdl

ROOT = Path(__file__).parents[2]
NOTEBOOKS = [ROOT / "notebooks" / "sdl_leaderboard.ipynb", ROOT / "templates" / "sdl" / "campaign.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_thin_and_clean(path):
    nb = nbformat.read(str(path), as_version=4)
    assert nb.metadata["kernelspec"] == {"name": "mdbench", "display_name": "Python (mdbench)", "language": "python"}
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    for line in code[0].source.splitlines():
        assert ": " in line and " = " in line and "  # " in line, line
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    src = "\n".join(c.source for c in code)
    assert len([ln for ln in src.splitlines() if ln.strip()]) < 150
    tree = ast.parse(src)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    names = {ln.split(":")[0] for ln in code[0].source.splitlines()}
    assert {"run_dir", "system"} <= names


def test_cli_compile_run_score_leaderboard_html(tmp_path):
    runner = CliRunner()
    params = ROOT / "params" / "sdl" / "small.yaml"
    asg, res = tmp_path / "asg", tmp_path / "res"
    out = runner.invoke(sdl, ["compile", "--params", str(params), "--out", str(asg)])
    assert out.exit_code == 0, out.output
    assert "12 assignments (6 full-length)" in out.output
    assert (asg / "agent" / "index.json").exists() and (asg / "evaluator" / "keys.json").exists()
    for pol in ("kernel", "class_prior"):
        out = runner.invoke(sdl, ["run", "--assignments", str(asg), "--policy", pol, "--random-draws", "2",
                                  "--out", str(res)])
        assert out.exit_code == 0, out.output
    out = runner.invoke(sdl, ["score", str(res), "--assignments", str(asg)])
    assert out.exit_code == 0 and "re-scored 12 campaigns from verified traces" in out.output
    out = runner.invoke(sdl, ["leaderboard", str(res), "--assignments", str(asg)])          # the HTML page: tests/sdl/test_leaderboard_page.py
    assert out.exit_code == 0, out.output
    assert "horizon [4], budgets evidence 8, experiments 4, reviews 0, random-control draws [2]" in out.output
    lb = json.loads((res / "leaderboard.json").read_text())
    (table,) = lb["tables"]
    assert [r["system"] for r in table["rows"]] and len(table["assignments"]) == 6 and table["horizons"] == [4]
    assert all(len(r["selection_lift_signs"]) == 6 for r in table["rows"])
    assert set(r["selection_lift_signs"] for r in table["rows"] if r["system"] == "class_prior") == {"000000"}
    # a trace altered after the run is refused by the re-scorer, with the file and the row named
    tr = next(res.glob("kernel/*/adaptive.trace.json"))
    d = json.loads(tr.read_text())
    d["log"][2]["message"] = "edited"
    tr.write_text(json.dumps(d))
    out = runner.invoke(sdl, ["score", str(res), "--assignments", str(asg)])
    assert out.exit_code != 0 and isinstance(out.exception, InputError)
    assert "log[2] (seq 2, action): sha256 does not match its content" in str(out.exception)
    assert str(tr) in str(out.exception)


def test_leaderboard_html_without_the_kernel_is_one_line(tmp_path):
    """A missing `mdbench` kernel is one line naming the fix — no NoSuchKernel traceback."""
    runner = CliRunner()
    asg, res = tmp_path / "asg", tmp_path / "res"
    runner.invoke(sdl, ["compile", "--params", str(ROOT / "params" / "sdl" / "small.yaml"), "--out", str(asg)])
    runner.invoke(sdl, ["run", "--assignments", str(asg), "--policy", "uniform", "--only", "vapdiff_crystal-s0-a6",
                        "--no-controls", "--out", str(res)])
    proc = subprocess.run([sys.executable, "-m", "mdbench", "sdl", "leaderboard", str(res), "--assignments", str(asg), "--html",
                           str(tmp_path / "lb.html"), "--kernel", "mdbench-no-such-kernel"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "make setup" in lines[0] and "mdbench-no-such-kernel" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "lb.html").exists()


def test_cli_usage_errors(tmp_path):
    runner = CliRunner()
    out = runner.invoke(sdl, ["run", "--assignments", str(tmp_path), "--out", str(tmp_path / "r")])
    assert out.exit_code != 0 and "exactly one of --policy" in out.output
    bad = tmp_path / "p.yaml"
    bad.write_text("n_candidates: 32\n")
    out = runner.invoke(sdl, ["compile", "--params", str(bad), "--out", str(tmp_path / "a")])
    assert isinstance(out.exception, InputError) and "unknown keys" in str(out.exception) and str(bad) in str(out.exception)


@pytest.mark.slow
def test_campaign_template_executes(tmp_path):
    """Execute templates/sdl/campaign.ipynb end to end with papermill on the small parameter set (slow: a kernel)."""
    import papermill as pm

    runner = CliRunner()
    asg = tmp_path / "asg"
    out = runner.invoke(sdl, ["compile", "--params", str(ROOT / "params" / "sdl" / "small.yaml"), "--out", str(asg)])
    assert out.exit_code == 0, out.output
    pm.execute_notebook(str(NOTEBOOKS[1]), str(tmp_path / "campaign.ipynb"), kernel_name="mdbench",
                        parameters={"run_dir": str(tmp_path / "res"), "system": "kernel",
                                    "assignments_dir": str(asg), "policy": "kernel", "panel": "full"},
                        progress_bar=False)
    import scrapbook as sb

    summary = sb.read_notebook(str(tmp_path / "campaign.ipynb")).scraps["summary"].data
    assert len(summary) == 6 and all(r["loss_at_budget_nats"] > 0 for r in summary)
