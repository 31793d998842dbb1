"""Issue 49, break 1: the evaluator's ledger through the coordinator's command line.

A coordinator started as ``python3 cheat.py mypolicy/weights.json`` where ``weights.json`` is a symlink to the
compile's ``evaluator/ledger.json`` (or naming ``evaluator/…`` directly) read every outcome, because every file
named on the command line was bound into the sandbox. Now nothing the command line names is mounted unless it
lies inside the granted policy folder; the evaluator files are 0600 for the evaluator's account; a granted
folder that reaches an evaluator folder is refused.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from sdl_redteam_helpers import HERE

from mdbench.sandbox import capabilities, ensure_user
from mdbench.sdl.bundle import load_compiled, write_compiled
from mdbench.sdl.campaign import run_campaign
from mdbench.sdl.commands import sdl
from mdbench.sdl.confine import COORDINATOR_USER, CoordinatorSandbox, GrantError
from mdbench.sdl.external import ExternalPolicy
from mdbench.sdl.metrics import campaign_metrics

needs_isolation = pytest.mark.skipif(not capabilities().get("namespaces"),
                                     reason="namespaces unavailable on this machine")


@pytest.fixture()
def mypolicy(tmp_path, compiled):
    """The attacker's own policy folder: the cheat program, ``weights.json`` → the evaluator's ledger."""
    d = tmp_path / "mypolicy"
    d.mkdir()
    shutil.copy(HERE / "cheat_coordinator.py", d / "cheat.py")
    (d / "weights.json").symlink_to(compiled.evaluator_dir / "ledger.json")
    return d


def cmd(policy_dir: Path, *read: str | Path, honest: bool = False) -> str:
    args = [sys.executable, str(policy_dir / "cheat.py"), "--mode", "argv_file"]
    for r in read:
        args += ["--read", str(r)]
    return shlex.join(args + (["--honest"] if honest else []))


def play(compiled, asg, command, policy_dir, confine=True):
    box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir,), policy_dir=policy_dir,
                             confine=confine).for_assignment(asg.assignment_id)
    run = run_campaign(compiled.ledger, asg, lambda: ExternalPolicy(command, timeout_s=60, sandbox=box), seed=0,
                       controls=False)
    err = "\n".join(s["record"].get("stderr_tail", "") for s in run.traces["adaptive"]["sessions"])
    return campaign_metrics(run.traces, compiled.ledger, asg)["branches"]["adaptive"], err


@needs_isolation
def test_an_argv_symlink_or_direct_path_into_evaluator_gains_nothing(compiled, mypolicy):
    asg = compiled.assignments[0]
    ev = compiled.evaluator_dir
    named = (mypolicy / "weights.json", ev / "ledger.json", ev / "assignments" / f"{asg.assignment_id}.json")
    leak, _ = play(compiled, asg, cmd(mypolicy, *named), mypolicy, confine=False)
    assert leak["loss_pre_nats"] < 0.05                                # teeth: unconfined, the ledger is read
    cheat, err = play(compiled, asg, cmd(mypolicy, *named), mypolicy)
    honest, _ = play(compiled, asg, cmd(mypolicy, honest=True), mypolicy)
    for p in named:
        assert f"ATTEMPT argv_file: {p}: unreadable" in err, err
    assert "outcomes learnt" not in err
    assert cheat["scores_nats"] == pytest.approx(honest["scores_nats"], abs=1e-12)
    assert cheat["loss_pre_nats"] == pytest.approx(math.log(4), abs=1e-12)


@needs_isolation
def test_sdl_run_refuses_a_command_line_naming_a_file_outside_the_policy_folder(compiled, mypolicy, tmp_path):
    """Through the CLI the same command lines are refused in one line before anything runs."""
    runner = CliRunner()
    aid = compiled.assignments[0].assignment_id
    for named in (mypolicy / "weights.json", compiled.evaluator_dir / "ledger.json"):
        out = runner.invoke(sdl, ["run", "--assignments", str(compiled.root), "--policy-cmd", cmd(mypolicy, named),
                                  "--policy-dir", str(mypolicy), "--only", aid, "--out", str(tmp_path / "res")])
        assert out.exit_code == 2, out.output
        assert "is not inside --policy-dir" in out.output and str(named) in out.output
        assert not (tmp_path / "res").exists()
    for grant in (compiled.root, compiled.evaluator_dir, compiled.evaluator_dir / "assignments"):
        out = runner.invoke(sdl, ["run", "--assignments", str(compiled.root), "--policy-cmd", cmd(grant),
                                  "--policy-dir", str(grant), "--only", aid, "--out", str(tmp_path / "res")])
        assert isinstance(out.exception, GrantError) and "evaluator-private folder" in str(out.exception)
        assert "\n" not in str(out.exception) and not (tmp_path / "res").exists()


def test_no_mount_reaches_an_evaluator_folder(compiled, mypolicy, tmp_path):
    """Every read-only mount of a session, resolved, lies outside every evaluator folder; a folder that holds
    one is only ever mounted with that folder hidden again; granting a path into evaluator/ is refused."""
    ev = [compiled.evaluator_dir.resolve(), compiled.agent_dir.resolve()]
    link = tmp_path / "innocent"
    link.symlink_to(compiled.evaluator_dir)
    box = CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir,), policy_dir=mypolicy)
    view = box.for_assignment(compiled.assignments[0].assignment_id).make_view()
    try:
        ro = box.readonly_paths(view)
        named = str(mypolicy / "weights.json")
        assert box.not_granted(shlex.split(cmd(mypolicy, named))) == [named]      # resolves into evaluator/
    finally:
        os.chmod(view, 0o700)
        shutil.rmtree(view)
    hidden = [p.resolve() for p in box.hidden_paths()]
    for p in ro:
        r = Path(p).resolve()
        for e in ev:
            assert not (r == e or e in r.parents), f"{p} reaches {e}"
            if r in e.parents:
                assert any(h == e or h in e.parents and r in h.parents for h in hidden), f"{p} holds {e} unhidden"
    assert mypolicy.resolve() in ro and not any(Path(p).name == "weights.json" for p in ro)
    for bad in (compiled.evaluator_dir / "ledger.json", link, compiled.root):
        with pytest.raises(GrantError, match="evaluator-private"):
            CoordinatorSandbox(agent_dir=compiled.agent_dir, hide=(compiled.evaluator_dir,),
                               expose=(bad,)).readonly_paths()


def test_evaluator_files_are_private_to_the_evaluator_account(vapdiff, compiled):
    """Modes 0600/0700 on every file and folder of evaluator/, also for a compile written before the rule
    (tightened when loaded); the coordinator's account cannot open the ledger even where the path is open."""
    for folder, dirs, files in os.walk(compiled.evaluator_dir):
        for name in dirs + files + ["."]:
            st = os.lstat(os.path.join(folder, name))
            assert st.st_mode & 0o077 == 0 and st.st_uid == os.geteuid(), (folder, name, oct(st.st_mode))
    if os.geteuid() != 0:
        pytest.skip("opening as the coordinator account needs root")
    top = Path(tempfile.mkdtemp(prefix="sdl49-open-"))
    try:
        os.chmod(top, 0o755)
        root = top / "asg"
        shutil.copytree(compiled.root, root)
        os.chmod(root, 0o755)
        os.chmod(root / "evaluator", 0o755)                     # an old compile, or a careless copy
        for p in (root / "evaluator").rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        uid, gid = ensure_user(COORDINATOR_USER)
        probe = [shutil.which("cat") or "/bin/cat", str(root / "evaluator" / "ledger.json")]
        teeth = subprocess.run(probe, user=uid, group=gid, extra_groups=[], capture_output=True, text=True)
        assert teeth.returncode == 0 and '"experiments"' in teeth.stdout   # teeth: world-readable, it is read
        load_compiled(root)                                     # loading tightens the tree
        got = subprocess.run(probe, user=uid, group=gid, extra_groups=[], capture_output=True, text=True)
        assert got.returncode != 0 and "Permission denied" in got.stderr and not got.stdout
        assert stat.S_IMODE(os.stat(root / "evaluator" / "ledger.json").st_mode) == 0o600
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_fresh_compile_writes_no_group_or_world_bit(vapdiff, tmp_path):
    from sdl_helpers import KEYS, SMALL_ROLES

    from mdbench.sdl.compiler import Budgets, CompileSpec, compile_assignments

    spec = CompileSpec(rotations=2, horizons=(2,), block_size=8, role_blocks=dict(SMALL_ROLES),
                       budgets=Budgets(2, 4, 0), seed=1)
    root = write_compiled(tmp_path / "c", vapdiff, compile_assignments(vapdiff, spec, KEYS), KEYS)
    modes = {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in (root / "evaluator").rglob("*")}
    assert modes and all(m & 0o077 == 0 for m in modes.values()), json.dumps({k: oct(v) for k, v in modes.items()})
