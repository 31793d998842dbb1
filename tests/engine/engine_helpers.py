"""Helpers shared by the engine room's tests (importable: pytest puts tests/engine on sys.path)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from _testseed import seed_for

GMX = shutil.which("gmx")
needs_gmx = pytest.mark.skipif(GMX is None, reason="GROMACS (gmx) not on PATH")

#: Preset for the water box: its own cut-off and short protocol lengths [ps].
WATER_PRESET = {
    "cutoff_nm": 0.8,
    "protocol": {"dt_fs": 2, "equilibration_nvt_ps": 2, "equilibration_npt_ps": 10, "production_ps": 10,
                 "xtc_interval_ps": 0.5, "energy_interval_ps": 0.1},
}


def make_water_case(run_dir: Path, case: str = "W", edge_nm: float = 2.2) -> Path:
    """Write ``cases/<case>/setup/{system.gro,topol.top}``: SPC water from ``gmx solvate``."""
    setup = run_dir / "cases" / case / "setup"
    setup.mkdir(parents=True, exist_ok=True)
    subprocess.run([GMX, "solvate", "-cs", "spc216.gro", "-box", str(edge_nm), str(edge_nm), str(edge_nm),
                    "-o", "system.gro"], cwd=setup, check=True, capture_output=True)
    n = sum(1 for line in (setup / "system.gro").read_text().splitlines() if "OW" in line)
    (setup / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spc.itp"\n'
                                     f"[ system ]\nwater\n[ molecules ]\nSOL {n}\n")
    return setup


def water_tpr(run: Path, runner, length_ps: float = 6.0, xtc_interval_ps: float = 0.5) -> Path:
    """``cases/W/seg/md.tpr``: NVT water (the case made by :func:`make_water_case`) for ``length_ps``."""
    from mdbench.engine.protocols import Timing, load_protocol, write_mdp

    wd = run / "cases/W/seg"
    wd.mkdir(parents=True)
    write_mdp(load_protocol("nvt"), wd / "md.mdp", {"rcoulomb": 0.8, "rvdw": 0.8},
              timing=Timing(length_ps=length_ps, energy_interval_ps=0.1, xtc_interval_ps=xtc_interval_ps),
              seed=seed_for("engine/md"))
    runner.grompp(wd / "md.mdp", run / "cases/W/setup/system.gro", run / "cases/W/setup/topol.top", wd / "md.tpr")
    return wd / "md.tpr"


def hold_one_thread(lock_dir: str, cap: int, log_path: str) -> None:
    """Hold one slot of a cap for 0.4 s, logging start/end times (a spawned worker of the cap test)."""
    from mdbench.engine.threads import ThreadSlots

    slots = ThreadSlots(cap=cap, lock_dir=lock_dir, poll_s=0.02)
    with slots.acquire(1):
        with open(log_path, "a") as fh:
            fh.write(f"start {time.monotonic()}\n")
        time.sleep(0.4)
        with open(log_path, "a") as fh:
            fh.write(f"end {time.monotonic()}\n")
