"""Issue 31: an agent that tries every known way to game ``mdbench episode run`` gains nothing.

Each test starts a real confined agent (``attacker.py``, on the agent toolchain's Python) through the CLI and
asserts what must hold whatever the machine: a ``result.json`` is written, the score is not above the null
agent's where no science was done, forged figures are flagged, nothing of the agent survives. No GROMACS run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mdbench.episode import aggregate as agg
from mdbench.episode import collect
from mdbench.episode.agents import share_readable
from mdbench.paths import PROJECT_ROOT

from _episode_helpers import AGENT_PY, mdbench, needs_namespaces, needs_root, prepare, processes_of, run, seen_by
from _mounts import loop_devices_under, mounts_under

HERE = Path(__file__).resolve().parent
ATTACKER = f"{AGENT_PY} {HERE / 'attacker.py'}"
EXPOSE = ("--expose", str(HERE / "attacker.py"))
pytestmark = [needs_namespaces, pytest.mark.timeout(300)]


def attack(ep: Path, mode: str, *opts: str, env: dict | None = None, timeout: float = 240) -> dict:
    res = mdbench("episode", "run", str(ep), "--agent", f"{ATTACKER} {mode}", "--no-reanalysis", *EXPOSE, *opts,
                  timeout=timeout, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return json.loads((ep / "result.json").read_text())


def report(ep: Path) -> dict:
    return json.loads((ep / "workspace" / "attack.json").read_text())


@pytest.fixture(scope="module")
def null_score(tmp_path_factory) -> float:
    ep = prepare(tmp_path_factory.mktemp("null") / "ep", "harness=reference", "model=null")
    return run(ep, "null", "--no-reanalysis")["score"]


def _cgroups_of(pid: int) -> list[str]:
    root = Path("/sys/fs/cgroup")
    return [str(p) for p in root.glob(f"*/mdbench-episode-{pid}-*")]


# ------------------------------------------------------------------------------------- item 1: our answers

def test_the_agent_finds_no_oracle_no_audit_no_project_but_its_tools(tmp_path, null_score):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=probe")
    result = attack(ep, "probe", "--timeout", "3")
    r = report(ep)
    assert result["status"] == "completed", r
    assert all(r[f"which_{x}"] is None for x in ("mdbench", "mdbench-oracle", "mdbench-buggy-agent"))
    assert r["import_mdbench"].startswith("refused") and r["imported_mdbench_with"] == []
    assert r["run_audit"].startswith("refused") and r["run_oracle"].startswith("refused")
    assert "found_lib_mdbench" not in r
    ours = str(PROJECT_ROOT)  # nothing of this checkout but the agent toolchain (.agent-env/, which has a lib/)
    assert not [d for d in r.get("found_dirs", []) if "/lib/mdbench" in d or (
        d.startswith(ours + "/") and not d.startswith(ours + "/.agent-env"))], r.get("found_dirs")
    # the tools of the task are there
    assert r["import_scientific_stack"] == "ok: ok" and r["gmx"] and r["packmol"]
    assert result["toolchain"]["reference_exposure"] is None and not result["agent"]["reference"]
    assert any(p.lower().startswith("mdanalysis==") for p in result["toolchain"]["packages"])
    assert not any(p.lower().startswith("mdbench") for p in result["toolchain"]["packages"])
    assert result["score"] <= null_score


def test_reference_agents_get_the_pipeline_by_a_marked_trusted_exposure(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=reference", "model=null")
    result = run(ep, "null", "--no-reanalysis")
    assert result["agent"]["reference"] and result["toolchain"]["reference_exposure"]
    assert any(p.endswith("/lib") for p in result["toolchain"]["reference_exposure"])


# ------------------------------------------------------------------------------- item 2/3: crash and hang

CRASH_FILES = {
    "fifo trajectory.json": lambda ws: os.mkfifo(ws / "trajectory.json"),
    "200,000-deep array": lambda ws: (ws / "trajectory.json").write_text("[" * 200_000 + "]" * 200_000),
    "1e308 costs in trajectory.json": lambda ws: (ws / "trajectory.json").write_text(
        '{"final_metrics": {"total_prompt_tokens": 1e308, "total_cost_usd": 1e308}, "steps": []}'),
    "1e999 in cost.json": lambda ws: (ws / "cost.json").write_text('{"usd": 1e999, "tokens": {"prompt": 1e999}}'),
    "ledger ns_charged 1e308": lambda ws: (ws / "run_record").mkdir() or (ws / "run_record" / "attempts.jsonl")
    .write_text('{"id": 1, "case": "DE", "ns_charged": 1e308}\n{"id": 2, "case": "DE", "ns_charged": NaN}\n'),
    "log Time: 1e999": lambda ws: (ws / "cases" / "DE").mkdir(parents=True) or (ws / "cases" / "DE" / "md.log")
    .write_text("1 GPU selected for this run.\n       Time:     1e999     1e999      200.0\n"),
    "1100-level tree": lambda ws: _deep(ws, 1100),
    "fifo ledger": lambda ws: (ws / "run_record").mkdir() or os.mkfifo(ws / "run_record" / "attempts.jsonl"),
}


def _deep(ws: Path, levels: int) -> None:
    sys.path.insert(0, str(HERE))
    from attacker import deep_tree  # noqa: PLC0415

    deep_tree(ws, levels)


@pytest.fixture
def tmp_path(tmp_path):
    """pytest's own clean-up (shutil.rmtree) recurses and fails on the 1,100-level trees: rm -rf does not."""
    yield tmp_path
    subprocess.run(["rm", "-rf", str(tmp_path)], check=False)


@pytest.mark.parametrize("name", sorted(CRASH_FILES))
def test_each_crash_or_hang_file_is_a_finding_never_a_crash(tmp_path, name):
    ws = tmp_path / "ws"
    ws.mkdir()
    CRASH_FILES[name](ws)
    t0 = time.monotonic()
    listing = collect.workspace_walk(ws)
    costs = collect.agent_costs(ws)
    ledger = collect.ns_charged(ws)
    disk = collect.ns_on_disk(ws, listing)
    gpu = collect.gpu_hours(ws, listing, max_wall_s=3600)
    assert time.monotonic() - t0 < 30
    doc = {"costs": costs, "ledger": ledger, "disk": disk, "gpu": gpu}
    json.dumps(doc, allow_nan=False)  # what result.json holds is strict JSON
    findings = costs["findings"] + ledger["findings"] + disk["findings"] + gpu["findings"]
    if name != "1100-level tree":
        assert findings, doc
    else:
        assert listing.truncated
    for v in (costs["total_tokens"], costs["usd"], ledger["total_ns"], gpu["gpu_hours"]):
        assert v is None or 0 <= v < 1e12


def test_an_agent_leaving_every_crash_file_gets_a_result_and_no_points(tmp_path, null_score):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=crashfiles")
    result = attack(ep, "crashfiles", "--timeout", "3")
    assert result["status"] == "completed" and "runner_error" not in result, result.get("runner_error")
    codes = {f["code"] for f in result["cost"]["findings"]}
    assert {"refused_not_regular", "refused_too_deep", "invalid_self_reported"} <= codes, codes
    assert result["tokens"] is None or result["tokens"] < 1e12
    assert result["cost_usd"] is None and result["gpu_hours"] == 0.0
    assert result["cost"]["self_reported"]["gpu_hours"] == 0.0
    assert result["ns_charged"] == 0.0  # every ledger row refused
    (rec,) = agg.load_episodes([ep])
    assert rec.scored and "refused" in " ".join(agg.notes([rec]))
    # whatever the audit made of it (an audit that fails is a stand-in of zeros), no point above the null agent
    (score,) = agg.scores([rec])["composite"].tolist()
    assert score <= null_score


def test_the_audit_itself_survives_a_1100_level_tree(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=deep")
    (ep / "workspace" / "deep").mkdir()
    _deep(ep / "workspace" / "deep", 1100)
    (ep / "workspace" / "run_record").mkdir(exist_ok=True)  # a run directory, so the audit reads the tree
    from mdbench.audit import audit_run  # noqa: PLC0415

    res = audit_run(ep / "workspace", ep / "bundle", tmp_path / "audit", reanalysis=False)
    assert res.composite_final >= 0


def test_a_fifo_ledger_with_progress_ticks_does_not_stop_the_wall_clock_limit(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=fifo")
    timeout_min, grace_s = 0.1, 1.0
    t0 = time.monotonic()
    result = attack(ep, "fifo-sleep", "--timeout", str(timeout_min), "--grace", str(grace_s), "--progress", "0.5")
    assert result["status"] == "timeout"
    assert result["wall_s"] <= timeout_min * 60 + grace_s + 10, result["wall_s"]
    assert time.monotonic() - t0 < 200  # collectors and the audit never opened the FIFOs blocking
    assert any(f["path"] == "run_record/attempts.jsonl" for f in result["cost"]["findings"])


# --------------------------------------------------------------------------------- item 5: shared state

@needs_root
def test_a_stash_in_shared_tmpfs_and_ipc_does_not_reach_the_next_episode(tmp_path):
    key = f"{os.getpid()}-{time.monotonic_ns()}"
    first = prepare(tmp_path / "first", "harness=redteam", "model=stash", "repeat=1")
    second = prepare(tmp_path / "second", "harness=redteam", "model=stash", "repeat=2")
    attack(first, f"stash {key}", "--timeout", "2", "--user", "mdbench-redteam-a")
    wrote = report(first)
    assert all(wrote[f"write {d}"].startswith("ok") for d in ("/dev/shm", "/var/tmp", "/run/lock", "/tmp")), wrote
    assert wrote["shmget_create"] >= 0  # the segment existed in the first episode's IPC namespace
    attack(second, f"read-stash {key}", "--timeout", "2", "--user", "mdbench-redteam-b")
    seen = report(second)
    assert seen["found"] == {d: False for d in ("/dev/shm", "/var/tmp", "/run/lock", "/tmp")}, seen
    assert seen["shmget_existing"] == -1
    for d in ("/dev/shm", "/var/tmp", "/run/lock", "/tmp"):  # nor on the host
        assert not Path(d, f"stash-{key}").exists()


# --------------------------------------------------------------------- item 4: processes and leftovers

@needs_root
def test_200_children_and_a_daemon_ignoring_sigterm_leave_no_process_no_cgroup_no_tmp(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=swarm")
    tmpdir = tmp_path / "runner-tmp"
    tmpdir.mkdir()
    user = "mdbench-redteam-swarm"
    env = dict(os.environ, TMPDIR=str(tmpdir))
    proc = subprocess.Popen([sys.executable, "-m", "mdbench.cli", "episode", "run", str(ep), "--agent",
                             f"{ATTACKER} swarm", "--no-reanalysis", *EXPOSE, "--timeout", "2", "--grace", "2",
                             "--user", user], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads((ep / "result.json").read_text())
    assert report(ep)["children"] == 200
    assert result["status"] == "completed" and result["stragglers_killed"] >= 201, result["stragglers_killed"]
    assert processes_of(user) == []
    assert _cgroups_of(proc.pid) == []
    assert sorted(os.listdir(tmpdir)) == []  # no mdbench-sandbox-* folder, no spec.json with the env
    assert result["limits"]["pids_max"] == 4096 and result["sandbox_limits"]["pids_max"] == 4096


@needs_root
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_runner_killed_mid_episode_leaves_an_interrupted_result_and_nothing_running(tmp_path, signum):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=killed")
    tmpdir = tmp_path / "runner-tmp"
    tmpdir.mkdir()
    user = f"mdbench-redteam-{signal.Signals(signum).name.lower()}"
    grace_s = 2.0
    proc = subprocess.Popen([sys.executable, "-m", "mdbench.cli", "episode", "run", str(ep), "--agent",
                             f"{ATTACKER} wait", "--no-reanalysis", *EXPOSE, "--timeout", "10", "--grace",
                             str(grace_s), "--user", user], env=dict(os.environ, TMPDIR=str(tmpdir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = ep / "workspace" / "started"
    deadline = time.monotonic() + 120
    while not seen_by(user, started) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert seen_by(user, started), proc.communicate(timeout=30)
    assert len(processes_of(user)) >= 21
    supervisors = [p for p in _pids() if "mdbench.sandbox" in _cmdline(p) and str(tmpdir) in _cmdline(p)]
    assert supervisors
    t_kill = time.monotonic()
    proc.send_signal(signum)
    proc.communicate(timeout=120)
    t_dead = time.monotonic()
    while (processes_of(user) or any(map(_alive, supervisors))) and time.monotonic() - t_kill < grace_s + 15:
        time.sleep(0.02)
    assert processes_of(user) == [], "the agent's tree outlived its runner"
    assert not any(map(_alive, supervisors)), "the supervisor outlived its runner"
    assert time.monotonic() - t_kill < grace_s + 15
    if signum == signal.SIGKILL:  # issue 48: nobody is left to audit the tree: no grace period
        assert time.monotonic() - t_dead <= 1.0, f"tree and supervisor lived {time.monotonic() - t_dead:.2f} s"
    for _ in range(50):  # the supervisor cleans up right after the tree is gone
        if not os.listdir(tmpdir) and not _cgroups_of(proc.pid):
            break
        time.sleep(0.1)
    assert os.listdir(tmpdir) == [] and _cgroups_of(proc.pid) == []
    for _ in range(100):  # the workspace quota: its namespace is gone, so are its mount and its loop device
        if not loop_devices_under(ep) and not mounts_under(ep) and not (ep / ".workspace.img").exists():
            break
        time.sleep(0.1)
    assert loop_devices_under(ep) == [] and mounts_under(ep) == [], (loop_devices_under(ep), mounts_under(ep))
    assert not (ep / ".workspace.img").exists()
    result = json.loads((ep / "result.json").read_text())
    assert result["limits"]["workspace_quota_mib"] > 0
    assert result["status"] == "interrupted" and result["score"] is None
    if signum == signal.SIGTERM:
        assert proc.returncode == 130 and "SIGTERM" in result["reason"]
    (rec,) = agg.load_episodes([ep])  # never dropped: counted as 0
    assert rec.scored and agg.scores([rec])["composite"].tolist() == [0.0]
    assert any("scored 0" in n for n in agg.notes([rec]))




def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _disk_bytes(root: Path) -> int:
    """Bytes the tree takes on disk (allocated blocks; a hard-linked file once), links never followed."""
    seen, total = set(), 0
    for folder, dirs, names in os.walk(root):
        for n in dirs + names:
            st = os.lstat(os.path.join(folder, n))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


# --------------------------------------------------------------------------------- the workspace quota

@needs_root
@pytest.mark.parametrize("what", ["big", "many"], ids=["one-big-file", "many-small-files"])
def test_an_agent_writing_past_its_workspace_quota_is_stopped_and_gains_nothing(tmp_path, null_score, what):
    ep = prepare(tmp_path / "ep", "harness=redteam", f"model=fill-{what}")
    quota_mib = 64
    result = attack(ep, f"fill {4 * quota_mib} {what}", "--timeout", "3",
                    "--workspace-quota-gib", str(quota_mib / 1024))
    out = (ep / "agent" / "stdout.log").read_text()
    assert "FILL " in out, out[-2000:] + (ep / "agent" / "stderr.log").read_text()[-2000:]
    got = json.loads(out.split("FILL ", 1)[1].splitlines()[0])
    # the kernel stopped the writes at the quota: the agent got ENOSPC, never 4x the quota
    assert got[what].startswith("refused after") and "No space left" in got[what], got
    assert int(got[what].split("after ")[1].split()[0]) <= quota_mib * 2**20
    # the result says so, and records the method and the limit
    q = result["workspace_quota"]
    assert q["method"] == "loop_ext4" and q["quota_mib"] == quota_mib and q["quota_reached"], q
    assert result["limits"]["workspace_quota_mib"] == quota_mib
    assert "workspace_quota" in result["limits_reached"], result.get("limits_reached")
    assert result["reason"].startswith("workspace_quota_exceeded"), result["reason"]
    # copied back for the audit within the quota: a sparse 1 TiB file stays a hole, hard links stay links
    ws = ep / "workspace"
    assert _disk_bytes(ws) <= (quota_mib + 4) * 2**20
    if got["sparse"].startswith("ok"):
        assert (ws / "sparse.bin").stat().st_size == 2**40 and (ws / "sparse.bin").stat().st_blocks < 64
    assert os.stat(ws / "small.bin").st_nlink == got["links"] + 1
    assert q["bytes"] <= quota_mib * 2**20
    # nothing left: no image, no loop device, no mount
    assert not (ep / ".workspace.img").exists()
    assert loop_devices_under(ep) == [] and mounts_under(ep) == []
    assert result["agent_input_intact"] and result["status"] == "completed"
    assert result["score"] is not None and result["score"] <= null_score


# ------------------------------------------------------------------------------------------ item 6, 7

def test_force_moves_the_workspace_away_and_starts_from_the_pristine_bundle(tmp_path, null_score):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=force")
    attack(ep, "fake-costs", "--timeout", "2")
    second = run(ep, "null", "--no-reanalysis", "--force")
    assert second["previous_runs"] == 1 and second["score"] == null_score
    assert not (ep / "workspace" / "cost.json").exists() and not (ep / "workspace" / "cases").exists()
    assert (ep / "previous" / "1" / "workspace" / "cost.json").is_file()
    assert second["agent_input_intact"] and sorted(os.listdir(ep / "workspace")) == ["PROMPT.md", "agent_input"]


def test_forged_costs_are_refused_flagged_and_measured_figures_shown_beside_them(tmp_path):
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=costs")
    result = attack(ep, "fake-costs", "--timeout", "2")
    cost = result["cost"]
    codes = [f["code"] for f in cost["findings"]]
    assert "invalid_self_reported" in codes and "ledger_under_reports" in codes
    assert cost["self_reported"]["usd"] is None and cost["self_reported"]["tokens"] == 5  # -1e6 refused
    assert cost["self_reported"]["gpu_hours"] == 0.0  # the negative wall time does not count
    assert cost["measured"]["ns_on_disk"] == pytest.approx(50.0) and result["ns_charged"] == pytest.approx(0.001)
    assert cost["measured"]["gpu_hours"] == 0.0 and cost["measured"]["wall_s"] > 0
    table = agg.cost_table(agg.load_episodes([ep]))
    row = table.iloc[0]
    assert row["MD on disk [ns] (measured)"] == pytest.approx(50.0)
    assert "ledger_under_reports" in row["flags"] and "invalid_self_reported" in row["flags"]
    assert row["cost [USD] (self-reported)"] is None


# ------------------------------------------------------------------------------------------ item 8

def _fabricated_run(dest: Path) -> Path:
    """A run record written without any MD: production 'completed', every observable 'estimated' or C, a
    clean_valid claim — what an agent with a JSON editor and no GROMACS can leave."""
    from mdbench.analysis.observables import REGISTRY
    from mdbench.record.store import RunRecord

    rec = RunRecord(dest)
    names = sorted({o.name for o in REGISTRY})
    finals, obs = {}, {}
    for case in ("DE", "HCE", "LHCE"):
        a = rec.reserve(case, planned_steps=5_000_000, dt_ps=0.002, kind="production", stage="40_production",
                        segment=f"cases/{case}/prod/prod")
        rec.complete(a, completed_steps=5_000_000, status="completed")
        for stage in ("10_setup", "20_em", "30_equil", "40_production", "50_analysis"):
            rec.set_stage_state(case, stage, "valid", "done")
        for k, name in enumerate(names):
            rec.set_observable_state(case, name, "C", "converged")
        finals[case] = {"40_production": f"stage_states.json#/{case}/40_production"}
        obs[case] = {n: f"observables.json#/{case}/{n}" for n in names}
    rec.write_terminal("clean_valid", final_stages=finals, observables=obs, unresolved=[])
    path = dest / "run_record" / "observables.json"
    states = json.loads(path.read_text())
    for case in states:
        for k, name in enumerate(sorted(states[case])):
            if k % 2:
                states[case][name]["state"] = "estimated"  # not a state of the contract
    path.write_text(json.dumps(states))
    return dest


def test_a_run_of_fabricated_json_scores_no_more_than_the_null_agent(tmp_path, null_score):
    src = _fabricated_run(tmp_path / "fabricated")
    share_readable(src)
    os.chmod(tmp_path, 0o755)
    ep = prepare(tmp_path / "ep", "harness=redteam", "model=fabricate")
    result = attack(ep, f"fabricate {src}", "--timeout", "2", "--expose", str(src))
    items = result["audit"]["items"]
    assert result["score"] <= null_score, {i: v for i, v in items.items() if v}
    assert items["E1"] < 1 and items["O1"] < 1


# ------------------------------------------------------------------------------------------ replays

def test_a_reference_agents_run_is_readable_by_any_account(tmp_path):
    out = tmp_path / "run"
    (out / "cases" / "DE" / "setup").mkdir(parents=True)
    (out / "cases" / "DE" / "setup" / "build.json").write_text("{}")
    os.chmod(out / "cases" / "DE" / "setup", 0o700)
    os.chmod(out / "cases" / "DE" / "setup" / "build.json", 0o600)
    (out / "link").symlink_to("/etc/hostname")
    before = os.stat("/etc/hostname").st_mode
    assert share_readable(out) >= 2
    assert os.stat(out / "cases" / "DE" / "setup").st_mode & 0o555 == 0o555
    assert os.stat(out / "cases" / "DE" / "setup" / "build.json").st_mode & 0o444 == 0o444
    assert os.stat("/etc/hostname").st_mode == before  # links are never followed
