"""The names the command line offers, each from its one place, below every room.

* **Presets** are the files ``params/presets/<name>.yaml``: :func:`preset_names` lists them smallest first (by
  the molecules over all cases), so a new preset is one new YAML file.
* **Executors** are registered here by name (papermill's engine registry as the model): name → the
  ``module:function`` that runs the chains of stage jobs, imported only when that executor runs, so the CLI
  reads the names without importing any executor (``mdbench.execute.jobs`` costs seconds to import).
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any, Callable

from mdbench.paths import PARAMS_DIR

#: executor name → ``module:function(chains, workers, force, on_done, target)``; target: the Dask scheduler
#: address (``dask``) or the Slurm profile YAML (``slurm``). The first is the default.
EXECUTORS: dict[str, str] = {
    "local": "mdbench.execute.jobs:run_local",
    "dask": "mdbench.execute.jobs:run_dask",
    "slurm": "mdbench.execute.slurm:run_on_slurm",
}


def executor_names() -> list[str]:
    """The registered executors, the default first."""
    return list(EXECUTORS)


def load_executor(name: str) -> Callable[..., None]:
    """The run function of the executor ``name`` (KeyError for an unknown name)."""
    module, function = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), function)


@functools.lru_cache(maxsize=4)
def preset_names(presets_dir: str | Path | None = None) -> tuple[str, ...]:
    """Names of the size presets, ``params/presets/<name>.yaml``, smallest first (molecules over all cases, then
    the name; a file without readable counts sorts last)."""
    from mdbench.yamlio import load_yaml

    folder = Path(presets_dir) if presets_dir is not None else PARAMS_DIR / "presets"

    def size(path: Path) -> tuple[float, str]:
        try:
            counts: Any = load_yaml(path).get("counts")
            return float(sum(sum(c.values()) for c in counts.values())), path.stem
        except Exception:  # noqa: BLE001 - a malformed preset is reported by its loader, not here
            return float("inf"), path.stem

    return tuple(p.stem for p in sorted(folder.glob("*.yaml"), key=size))
