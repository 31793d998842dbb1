"""Where the project's own files live (templates, params), found from the installed package."""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root: lib/mdbench/paths.py → parents[2]. Override with MDBENCH_ROOT.
PROJECT_ROOT = Path(os.environ.get("MDBENCH_ROOT", Path(__file__).resolve().parents[2]))
TEMPLATES_DIR = PROJECT_ROOT / "templates"
PARAMS_DIR = PROJECT_ROOT / "params"
NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
OUTPUTS_DIR = PROJECT_ROOT / "outputs"
SHARED_DIR = Path(os.environ.get("MDBENCH_SHARED", PROJECT_ROOT.parent / "shared"))
