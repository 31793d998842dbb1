"""Packaging: environment.yml and pyproject.toml list the same Python packages; the CLI answers."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from mdbench.paths import PROJECT_ROOT

CONDA_ONLY = {"python", "pip", "gromacs", "packmol"}


def _name(requirement: str) -> str:
    name = re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0]
    return name.lower().replace("_", "-")


def _pyproject_names() -> set[str]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    if any(r.startswith("dask[distributed]") for r in project["dependencies"]):
        names.add("distributed")
    return names


def _environment_names() -> set[str]:
    env = yaml.safe_load((PROJECT_ROOT / "environment.yml").read_text())
    names: set[str] = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            names |= {_name(d) for d in dep.get("pip", [])}
        else:
            names.add(_name(dep))
    return names - CONDA_ONLY


def test_environment_yml_agrees_with_pyproject():
    assert _environment_names() == _pyproject_names()


def test_six_is_pinned_for_scrapbook():
    assert "six" in _pyproject_names()


def test_cli_lists_every_room():
    out = subprocess.run([sys.executable, "-m", "mdbench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for command in ("bundle", "study", "analyze", "audit", "report", "batch", "record", "arena", "sdl",
                    "run-template"):
        assert re.search(rf"^\s+{command}\s", out.stdout, re.M), command


def test_python_dash_m_mdbench_is_the_cli():
    """``python -m mdbench`` (used by the benchmarks to simulate their micro case) runs the same CLI."""
    out = subprocess.run([sys.executable, "-m", "mdbench", "study", "run", "--help"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert "--no-analysis" in out.stdout and "--preset" in out.stdout


def test_ci_script_runs_make_test():
    text = (PROJECT_ROOT / ".ci" / "run").read_text()
    assert "make test" in text and "CI=true" in text


def test_gpu_machines_get_a_cuda_gromacs_and_slurm_gets_dask_jobqueue():
    """environment-cuda.yml layers conda-forge's CUDA GROMACS build over environment.yml, which names it."""
    cuda = yaml.safe_load((PROJECT_ROOT / "environment-cuda.yml").read_text())
    assert cuda["channels"] == ["conda-forge"] and cuda["dependencies"] == ["gromacs=*=*cuda*"]
    assert "gromacs=*=*cuda*" in (PROJECT_ROOT / "environment.yml").read_text()
    assert "dask-jobqueue" in _pyproject_names() and "dask-jobqueue" in _environment_names()
