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


# ------------------------------------------------------------------------- issue 49: a foreign compile's run
def test_a_system_run_against_a_foreign_compile_is_refused_not_a_table_of_its_own(runs, compiled, vapdiff,
                                                                                 tmp_path):
    """The attacker compiles the same record with keys of their own (the ledger is theirs to read), runs
    against it and copies the system folder into the real results folder. Scores are taken only against the
    compile named on the command line: the foreign system is refused in one line, never a second table —
    also when its run.json claims the real compile's key."""
    from sdl_helpers import KEYS, SMALL_ROLES

    from mdbench.sdl.bundle import load_compiled, write_compiled
    from mdbench.sdl.compiler import Budgets, CompileSpec, EvaluatorKeys, compile_assignments

    mine = EvaluatorKeys.for_tests("attacker")
    assert mine.key_sha256 != KEYS.key_sha256
    spec = CompileSpec(rotations=6, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 1), seed=5)
    own = load_compiled(write_compiled(tmp_path / "own", vapdiff, compile_assignments(vapdiff, spec, mine), mine))
    run_system(own, own.assignments[:2], lambda: make_policy("kernel", 0), "attacker", tmp_path / "theirs")
    res, _ = _copy(runs, tmp_path)
    shutil.copytree(tmp_path / "theirs" / "attacker", res / "attacker")
    teeth = build_leaderboards(score_results(res, [compiled.root, own.root]))
    assert len(teeth.tables) == 2 and not teeth.refused              # teeth: naming both compiles shows both
    for args in (["--assignments", str(compiled.root)], ["--compile-sha256", compiled.keys.key_sha256]):
        lb = CliRunner().invoke(sdl, ["leaderboard", str(res), *args])
        assert lb.exit_code == 0, lb.output
        lines = [ln for ln in lb.output.splitlines() if ln.startswith("refused attacker")]
        assert len(lines) == 1 and "another compile" in lines[0] and mine.key_sha256[:12] in lines[0], lb.output
        assert sum(ln.startswith("table ") for ln in lb.output.splitlines()) == 1
        assert "attacker" not in "".join(ln for ln in lb.output.splitlines() if not ln.startswith("refused"))
        out = CliRunner().invoke(sdl, ["score", str(res), *args])
        assert out.exit_code != 0 and isinstance(out.exception, InputError)
        assert "another compile" in str(out.exception) and "\n" not in str(out.exception)
    # the run.json claims the real compile: its signed manifests still give it away
    rj = res / "attacker" / "run.json"
    body = json.loads(rj.read_text())
    body["evaluator_key_sha256"], body["compile_dir"] = compiled.keys.key_sha256, str(compiled.root)
    rj.write_text(json.dumps(body))
    lbs = build_leaderboards(score_results(res, compiled.root))
    assert "attacker" in lbs.refused and len(lbs.tables) == 1
    why = lbs.refused["attacker"]
    assert "is not in the compile folder" in why or "not signed with this compile's evaluator key" in why, why
    # no compile named: a usage error, never the folder's own word
    out = CliRunner().invoke(sdl, ["leaderboard", str(res)])
    assert out.exit_code == 2 and "--assignments" in out.output
