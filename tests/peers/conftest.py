"""One real micro trajectory of the study's own DE electrolyte, shared by the peer cross-checks.

The micro DE box (8 LiFSI, 80 DMC, 1,040 atoms) is built by ``mdbench.build`` from the frozen force field and
run with the study's protocols (``params/protocols``) on one thread: minimisation, 5 ps NVT, 20 ps NPT, then
40 ps NVT at the mean NPT volume with frames every 0.1 ps and the pressure tensor every 0.02 ps. Our side of
every comparison is ``mdbench.analysis.pipeline.analyze_files`` and its ``results.json`` (the public
interface), computed once here. The run is cached in pytest's cache folder keyed by everything that defines
it (protocols, preset, force field, the lengths and seed below), so a second session reuses it.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from mdbench.paths import PARAMS_DIR

sys.path.insert(0, str(Path(__file__).parent))  # _peers, for the test modules

CASE, PRESET, SEED = "DE", "micro", 2026
NVT_PS, NPT_PS, PROD_PS = 5.0, 20.0, 40.0
XTC_PS, ENERGY_PS = 0.1, 0.02


#: Independent replicas for the peers that need more than one trajectory (new packmol box and velocities each);
#: the first is SEED, so its run is the shared one.
REPLICA_SEEDS = (SEED, 3026, 4026)


def _key(seed: int = SEED) -> str:
    from mdbench.inputs.forcefield import forcefield_checksum

    h = hashlib.sha256(repr((CASE, PRESET, seed, NVT_PS, NPT_PS, PROD_PS, XTC_PS, ENERGY_PS)).encode())
    for p in sorted((PARAMS_DIR / "protocols").glob("*.yaml")) + [PARAMS_DIR / "presets" / f"{PRESET}.yaml"]:
        h.update(p.read_bytes())
    h.update(forcefield_checksum().encode())
    return h.hexdigest()[:16]


def _produce(wd: Path, seed: int = SEED) -> None:
    import pyedr

    from mdbench.build import build_system
    from mdbench.validation.forcefield import protocol_segment, scale_to_volume

    run = wd / "md"
    if not (run / "topol.top").is_file():  # an interrupted session resumes after its last finished segment
        shutil.rmtree(wd / "setup", ignore_errors=True)
        res = build_system(CASE, PRESET, wd / "setup", seed=seed)
        assert res.passed, [a for a in res.audits if not a.passed]
        run.mkdir(exist_ok=True)
        for f in (wd / "setup").iterdir():
            if f.suffix in (".itp", ".top", ".gro"):
                shutil.copy(f, run / f.name)
    protocol_segment(run, "em", "em", f"{CASE}.gro", seed=seed)
    protocol_segment(run, "nvt", "nvt", "em.gro", length_ps=NVT_PS, seed=seed)
    protocol_segment(run, "npt", "npt", "nvt.gro", length_ps=NPT_PS, seed=seed, checkpoint="nvt.cpt")
    e = pyedr.edr_to_dict(str(run / "npt.edr"))
    half = e["Time"] >= e["Time"][-1] / 2
    if not (run / "prod_start.gro").is_file():
        scale_to_volume(run, "npt.gro", "prod_start.gro", float(e["Volume"][half].mean()))
    protocol_segment(run, "prod", "production", "prod_start.gro", length_ps=PROD_PS, seed=seed + 1,
                     xtc_interval_ps=XTC_PS, energy_interval_ps=ENERGY_PS)


def micro_de_run(request, tmp_path_factory, seed: int = SEED) -> dict:
    """``{"tpr", "xtc", "edr", "results", "results_path", "seed"}``: the micro DE production of ``seed`` (cached
    in pytest's cache folder) and our results.json (guard 0)."""
    if shutil.which("gmx") is None or shutil.which("packmol") is None:
        pytest.skip("needs gmx and packmol (make setup)")
    from mdbench.analysis.pipeline import AnalysisSettings, analyze_files

    # tests/analysis_registry/test_speciation.py loads this file again as its own module, which makes a second
    # fixture of the same name: the analysis of each seed is shared through the session's config, done once
    shared = getattr(request.config, "_mdbench_peers_micro_de", None)
    if shared is None:
        shared = request.config._mdbench_peers_micro_de = {}
    if seed in shared:
        return shared[seed]
    cache = Path(request.config.cache.mkdir(f"mdbench-peers-{_key(seed)}"))
    md = cache / "md"
    if not (md / "prod.gro").is_file():
        _produce(cache, seed)
    files = {k: md / f"prod.{k}" for k in ("tpr", "xtc", "edr")}
    out = tmp_path_factory.mktemp(f"peers{seed}") / "analysis"
    # 40 ps has no diffusive (beta ~ 1) window of 0.9 decades for the ions; for a comparison of estimators on
    # one window with several lags the beta band is widened here (the study's registered rule is unchanged)
    settings = AnalysisSettings(diffusion_beta_range=(0.5, 1.5), diffusion_min_decades=0.5)
    doc = analyze_files(files["tpr"], files["xtc"], files["edr"], out, guard_ps=0.0, case=CASE, figures=False,
                        workers=1, settings=settings)
    shared[seed] = {**files, "results": doc, "results_path": out / "results.json", "seed": seed}
    return shared[seed]


@pytest.fixture(scope="session")
def micro_de(request, tmp_path_factory) -> dict:
    """The shared micro DE production of :data:`SEED` and our results.json (see :func:`micro_de_run`)."""
    return micro_de_run(request, tmp_path_factory, SEED)


@pytest.fixture(scope="session")
def micro_de_replicas(request, tmp_path_factory, micro_de) -> dict[int, dict]:
    """Every seed of :data:`REPLICA_SEEDS` → its run and results (the first is :func:`micro_de`)."""
    return {SEED: micro_de, **{s: micro_de_run(request, tmp_path_factory, s) for s in REPLICA_SEEDS[1:]}}
