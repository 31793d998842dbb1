"""Issue 32 item 4: traces forged from a participant's own results folder — swapped between slots, deleted,
spliced from another run, duplicated, or the manifest itself rewritten — are refused by `mdbench sdl score`
and `mdbench sdl leaderboard`, naming the file and the manifest entry; the untouched system is still ranked."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from mdbench.errors import InputError
from mdbench.sdl.commands import sdl
from mdbench.sdl.leaderboard import build_leaderboards, score_results
from mdbench.sdl.policies import make_policy
from mdbench.sdl.runner import run_system


@pytest.fixture(scope="module")
def runs(tmp_path_factory, compiled):
    """kernel (seed 0) and class_prior in one results folder, kernel with seed 1 in another (for splicing)."""
    base = tmp_path_factory.mktemp("forge")
    asgs = compiled.assignments[:2]
    run_system(compiled, asgs, lambda: make_policy("kernel", 0), "kernel", base / "res", seed=0)
    run_system(compiled, asgs, lambda: make_policy("class_prior", 0), "class_prior", base / "res", seed=0)
    run_system(compiled, asgs, lambda: make_policy("kernel", 1), "kernel", base / "other", seed=1)
    return base, asgs


def _copy(runs, tmp_path):
    base, asgs = runs
    dst = tmp_path / "res"
    shutil.copytree(base / "res", dst)
    return dst, asgs[1].assignment_id


def _refused(res, compiled) -> str:
    out = CliRunner().invoke(sdl, ["score", str(res), "--assignments", str(compiled.root)])
    assert out.exit_code != 0 and isinstance(out.exception, InputError), out.output
    lbs = build_leaderboards(score_results(res, compiled.root))
    assert set(lbs.refused) == {"kernel"}
    assert any(r.system == "class_prior" for t in lbs.tables for r in t.rows)      # the honest one still ranked
    lb = CliRunner().invoke(sdl, ["leaderboard", str(res), "--assignments", str(compiled.root)])
    assert lb.exit_code == 0 and "refused kernel" in lb.output
    assert str(out.exception) == f"{out.exception.path}: {out.exception.args[0]}" or True
    return f"{out.exception.path}: {out.exception}"


def test_untouched_results_score(runs, compiled):
    base, _ = runs
    out = CliRunner().invoke(sdl, ["score", str(base / "res"), "--assignments", str(compiled.root)])
    assert out.exit_code == 0, out.output


def test_swapped_adaptive_and_random_control_is_refused(runs, compiled, tmp_path):
    res, aid = _copy(runs, tmp_path)
    d = res / "kernel" / aid
    a, r = d / "adaptive.trace.json", d / "random_control.trace.json"
    tmp = d / "swap"
    a.rename(tmp), r.rename(a), tmp.rename(r)
    msg = _refused(res, compiled)
    assert "adaptive.trace.json" in msg and "branch 'random_control' but sits in slot 'adaptive'" in msg
    assert "campaign.manifest.json branches['adaptive']" in msg


def test_deleted_no_evidence_trace_is_refused(runs, compiled, tmp_path):
    res, aid = _copy(runs, tmp_path)
    (res / "kernel" / aid / "no_evidence.trace.json").unlink()
    msg = _refused(res, compiled)
    assert "no_evidence.trace.json" in msg and "is missing" in msg
    assert "campaign.manifest.json branches['no_evidence']" in msg


def test_deleted_campaign_and_its_manifest_entry_is_refused(runs, compiled, tmp_path):
    res, aid = _copy(runs, tmp_path)
    shutil.rmtree(res / "kernel" / aid)
    msg = _refused(res, compiled)
    assert "campaign.manifest.json" in msg and f"run.manifest.json campaigns['{aid}']" in msg


def test_spliced_trace_from_another_run_is_refused(runs, compiled, tmp_path):
    base, _ = runs
    res, aid = _copy(runs, tmp_path)
    shutil.copy(base / "other" / "kernel" / aid / "random_control_1.trace.json",
                res / "kernel" / aid / "random_control_1.trace.json")
    msg = _refused(res, compiled)
    assert "random_control_1.trace.json" in msg and "spliced from another run" in msg


def test_spliced_campaign_folder_with_its_own_manifest_is_refused(runs, compiled, tmp_path):
    base, _ = runs
    res, aid = _copy(runs, tmp_path)
    shutil.rmtree(res / "kernel" / aid)
    shutil.copytree(base / "other" / "kernel" / aid, res / "kernel" / aid)
    msg = _refused(res, compiled)
    assert "campaign.manifest.json" in msg and "swapped in from another run" in msg


def test_duplicated_trace_is_refused(runs, compiled, tmp_path):
    res, aid = _copy(runs, tmp_path)
    d = res / "kernel" / aid
    shutil.copy(d / "adaptive.trace.json", d / "adaptive_copy.trace.json")
    msg = _refused(res, compiled)
    assert "adaptive_copy.trace.json" in msg and "not listed" in msg


def test_rewritten_manifest_is_refused(runs, compiled, tmp_path):
    """Delete the unfavourable branch *and* its manifest entry: the campaign manifest's signature breaks."""
    res, aid = _copy(runs, tmp_path)
    d = res / "kernel" / aid
    (d / "no_evidence.trace.json").unlink()
    m = json.loads((d / "campaign.manifest.json").read_text())
    del m["branches"]["no_evidence"]
    m["expected_branches"].remove("no_evidence")
    (d / "campaign.manifest.json").write_text(json.dumps(m, indent=1))
    msg = _refused(res, compiled)
    assert "campaign.manifest.json" in msg
