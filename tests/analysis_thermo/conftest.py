"""Real GROMACS energy files for the reader tests: the project's own micro DE run and tiny water runs.

* ``micro_de_energy_files``: minimisation, NVT, NPT and production ``.edr`` of the micro DE electrolyte run with
  the study's protocols — the run the peer cross-checks make (``tests/peers/conftest.py``), produced by its
  code into the same pytest-cache folder, so one session makes it once for both rooms.
* ``water_energy_files``: 0.2 ps of 216 SPC waters under the study's NVT protocol with ``nstcalcenergy`` = 5 <
  ``nstenergy`` = 10 (frames with ``nsum > 0``: value, average and sum per term, after a first frame with
  ``nsum = 0``) and ``free-energy = yes`` with ``separate-dhdl-file = no`` (free-energy blocks of
  double/int/float subblocks in every frame); the same with ``dh-hist-size`` (histogram blocks with int64 subblocks whose lengths change
  from frame to frame); and the same in double precision (``gmx_d``, where installed).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from _testseed import seed_for

#: The study's NVT protocol for 0.2 ps of water, computing energies every 5 steps but writing every 10, with
#: the free-energy code on (no perturbed atoms: dH/dλ and ΔH blocks written into the energy file).
_WATER_OVERRIDES = {"rcoulomb": 0.8, "rvdw": 0.8, "nstcalcenergy": 5, "nstenergy": 10, "free-energy": "yes",
                    "init-lambda-state": 0, "fep-lambdas": "0 0.5 1", "nstdhdl": 10, "separate-dhdl-file": "no",
                    "dhdl-derivatives": "yes"}
_HISTOGRAMS = {"dh-hist-size": 20, "dh-hist-spacing": 0.1}
_TOP = """#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spc.itp"
[ system ]
water
[ molecules ]
SOL 216
"""


def _peers_run_helpers():
    """``tests/peers/conftest.py`` as a module (its run key and producer; pytest's own copy is not importable)."""
    path = Path(__file__).parents[1] / "peers" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_mdbench_peers_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def micro_de_energy_files(request) -> dict[str, Path]:
    """``{"em", "nvt", "npt", "prod"}`` → the micro DE run's energy files (real GROMACS, study protocols)."""
    if shutil.which("gmx") is None or shutil.which("packmol") is None:
        pytest.skip("needs gmx and packmol (make setup)")
    peers = _peers_run_helpers()
    cache = Path(request.config.cache.mkdir(f"mdbench-peers-{peers._key()}"))
    md = cache / "md"
    if not (md / "prod.gro").is_file():
        peers._produce(cache)
    return {stage: md / f"{stage}.edr" for stage in ("em", "nvt", "npt", "prod")}


@pytest.fixture(scope="session")
def water_energy_files(tmp_path_factory) -> dict[str, Path]:
    """``{"sums_and_blocks", "histograms"[, "double"]}`` → energy files of tiny water runs (module docstring)."""
    gmx = shutil.which("gmx")
    top_dir = next((d for d in ("/usr/share/gromacs/top", "/usr/local/gromacs/share/gromacs/top")
                    if (Path(d) / "spc216.gro").is_file()), None)
    if gmx is None or top_dir is None:
        pytest.skip("GROMACS (gmx and its share/top) not found")
    from mdbench.engine.protocols import Timing, load_protocol, write_mdp

    d = tmp_path_factory.mktemp("water_edr")
    (d / "topol.top").write_text(_TOP)
    timing = Timing(length_ps=0.2, energy_interval_ps=0.02, xtc_interval_ps=0.1)
    runs = {"sums_and_blocks": gmx, "histograms": gmx}
    if shutil.which("gmx_d"):
        runs["double"] = shutil.which("gmx_d")
    for name in runs:
        write_mdp(load_protocol("nvt"), d / f"{name}.mdp",
                  {**_WATER_OVERRIDES, **(_HISTOGRAMS if name == "histograms" else {})}, timing=timing,
                  seed=seed_for("water_edr/seed"))
    for name, exe in runs.items():
        for cmd in ([exe, "-quiet", "grompp", "-f", f"{name}.mdp", "-c", f"{top_dir}/spc216.gro", "-p", "topol.top",
                     "-o", f"{name}.tpr"],
                    [exe, "-quiet", "mdrun", "-nt", "1", "-deffnm", name]):
            p = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-2000:]
    return {name: d / f"{name}.edr" for name in runs}
