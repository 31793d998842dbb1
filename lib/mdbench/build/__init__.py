"""The ``build`` room: pack a case box with packmol, assemble its topology, run the setup audits.

``build_system(case, preset, out_dir, seed=2026, density_g_cm3=None) -> BuildResult``.
"""

from mdbench.build.audits import Audit
from mdbench.build.packing import PackingError
from mdbench.build.system import BuildResult, build_system

__all__ = ["Audit", "BuildResult", "PackingError", "build_system"]
