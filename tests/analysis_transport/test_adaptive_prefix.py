"""``benchmarks/adaptive_sampling.py prefix`` on a real micro production: the first segment and its 4x
extension through the study's own estimators (D, and sigma_NE / sigma from the collective estimator), each row
projected by the projection's rule (issue 46)."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

from mdbench.analysis.observables import SIGMA, SIGMA_NE

ROOT = Path(__file__).parents[2]
_peers_spec = importlib.util.spec_from_file_location("peers_conftest", ROOT / "tests" / "peers" / "conftest.py")
_peers = importlib.util.module_from_spec(_peers_spec)
_peers_spec.loader.exec_module(_peers)
micro_de = _peers.micro_de  # the shared micro production (a fixture)
_bench_spec = importlib.util.spec_from_file_location("adaptive_sampling", ROOT / "benchmarks" / "adaptive_sampling.py")
bench = importlib.util.module_from_spec(_bench_spec)
_bench_spec.loader.exec_module(bench)


def test_prefix_rows_follow_the_projection_rule(micro_de, tmp_path):
    folder = tmp_path / "DE" / "prod"
    folder.mkdir(parents=True)
    for k in ("tpr", "xtc"):  # copies: the readers never follow a link
        shutil.copyfile(micro_de[k], folder / f"prod.{k}")
    out = tmp_path / "rows.json"
    assert bench.main(["prefix", str(folder), "--first-ps", "10", "1000", "--factor", "4", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {r["first_ps"] for r in rows} == {10.0}  # 1000 x 4 ps is longer than the production: skipped
    by = {r["result"]: r for r in rows}
    assert SIGMA_NE in by and SIGMA in by and any(n.startswith("self_diffusion/") for n in by)
    for name in (SIGMA_NE, SIGMA):  # lags that grow with the block: the relative half-width carries over
        r = by[name]
        rel_first, rel_obtained = r["hw_first"] / abs(r["value_first"]), r["hw_obtained"] / abs(r["value_obtained"])
        assert r["ratio"] == pytest.approx(rel_obtained / rel_first)
    for name, r in by.items():
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert r["ratio_sqrt"] == pytest.approx(r["hw_obtained"] / (r["hw_first"] / 2.0))
