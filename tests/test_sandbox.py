"""The sandbox against processes that try to get out: read hidden files, write frozen ones, reach the network,
outlive their timeout, widen their CPU set. Each test runs a real confined process (no mocks)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mdbench.sandbox import (SYSTEM_DIRS, Confinement, SandboxError, capabilities, run_confined, runtime_paths,
                             spawn_confined)

from _mounts import loop_devices_under, mounts_under

CAPS = capabilities()
needs_namespaces = pytest.mark.skipif(not CAPS.get("namespaces"),
                                      reason=f"namespaces unavailable here: {CAPS.get('namespace_error')}")
needs_root = pytest.mark.skipif(not CAPS.get("root"), reason="needs root (separate user, cgroups)")


def _conf(workdir: Path, **kw) -> Confinement:
    kw.setdefault("readonly", runtime_paths())
    kw.setdefault("env", {"PATH": "/usr/bin:/bin", "HOME": str(workdir)})
    kw.setdefault("grace_s", 2.0)
    return Confinement(workdir=workdir, **kw)


def _python(tmp_path: Path, code: str, conf: Confinement, **kw):
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    res = run_confined([sys.executable, "-c", textwrap.dedent(code)], conf, stdout=out, stderr=err, **kw)
    return res, out.read_text(), err.read_text()


@pytest.fixture
def world(tmp_path: Path):
    """A workspace, a frozen input folder (world-writable, so only the mount stops writes), a private file.

    Built in a folder every user may search (pytest's own base folder is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="mdbench-sandbox-test-"))
    os.chmod(base, 0o755)
    yield _world(base)
    shutil.rmtree(base, ignore_errors=True)


def _world(tmp_path: Path) -> dict[str, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    (frozen / "input.txt").write_text("frozen\n")
    os.chmod(frozen, 0o777)
    os.chmod(frozen / "input.txt", 0o666)
    private = tmp_path / "evaluator"
    private.mkdir()
    (private / "answers.json").write_text('{"t_plus": 0.42}')
    os.chmod(private, 0o755)
    os.chmod(private / "answers.json", 0o644)
    os.chmod(tmp_path, 0o755)
    return {"ws": ws, "frozen": frozen, "private": private, "tmp": tmp_path}


@needs_namespaces
def test_cheating_process_cannot_read_write_or_phone_home(world, monkeypatch):
    monkeypatch.setenv("MDBENCH_TEST_SECRET", "s3cret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    conf = _conf(world["ws"], readonly=(world["frozen"], *runtime_paths()), hidden=(world["private"],),
                 private_tmp=False)  # the fixture lives in /tmp: keep it visible so that `hidden` is what hides
    res, out, err = _python(world["tmp"], f"""
        import json, os, socket
        r = {{"uid": os.getuid(), "env": dict(os.environ), "procs": [p for p in os.listdir("/proc") if p.isdigit()]}}
        try:
            r["answers"] = open("{world['private']}/answers.json").read()
        except OSError as e:
            r["answers"] = type(e).__name__
        r["private_listing"] = os.listdir("{world['private']}")
        for name in ("input.txt", "new.txt"):
            try:
                open("{world['frozen']}/" + name, "w").write("tampered")
                r["write_" + name] = "written"
            except OSError as e:
                r["write_" + name] = e.errno
        open("result.txt", "w").write("mine")
        s = socket.socket(); s.settimeout(2)
        try:
            s.connect(("127.0.0.1", {port})); r["host_port"] = "connected"
        except OSError as e:
            r["host_port"] = type(e).__name__
        inner = socket.socket(); inner.bind(("127.0.0.1", 0)); inner.listen(1)
        c = socket.create_connection(inner.getsockname(), timeout=2); r["loopback_inside"] = "ok"
        print(json.dumps(r))
    """, conf)
    server.close()
    assert res.status == "exited" and res.exit_code == 0, err
    r = json.loads(out)
    if CAPS["root"]:
        assert r["uid"] != 0 and res.method["user"]
    assert r["answers"] in ("FileNotFoundError", "PermissionError") and r["private_listing"] == []
    assert r["write_input.txt"] == 30 and r["write_new.txt"] == 30  # EROFS although the folder is 0777
    assert (world["frozen"] / "input.txt").read_text() == "frozen\n"
    assert not (world["frozen"] / "new.txt").exists()
    assert (world["ws"] / "result.txt").read_text() == "mine"
    assert "MDBENCH_TEST_SECRET" not in r["env"] and set(r["env"]) <= {"PATH", "HOME", "LC_CTYPE"}
    assert r["host_port"] != "connected" and r["loopback_inside"] == "ok"
    assert len(r["procs"]) <= 3  # its own namespace: the reaper, itself (no host processes visible)
    assert res.method["network_namespace"] and res.method["pid_namespace"]


@needs_namespaces
def test_timeout_ends_the_whole_tree_with_setsid_children(world):
    beat = world["ws"] / "beat"
    conf = _conf(world["ws"], timeout_s=2.0, grace_s=1.0)
    t0 = time.monotonic()
    res, out, err = _python(world["tmp"], f"""
        import os, signal, time
        if os.fork() == 0:
            os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                open("{beat}", "w").write(str(time.time())); time.sleep(0.1)
        time.sleep(60)
    """, conf)
    elapsed = time.monotonic() - t0
    assert res.status == "timeout" and res.exit_code == 128 + 15
    assert elapsed < 2.0 + 1.0 + 5.0  # timeout + grace + start-up margin
    assert res.stragglers_killed >= 1
    last = beat.read_text()
    time.sleep(0.5)
    assert beat.read_text() == last, "a child outlived the timeout"
    if CAPS["root"]:
        uid = res.method["uid"]
        left = subprocess.run(["pgrep", "-u", str(uid)], capture_output=True, text=True).stdout.split()
        assert left == [], f"processes of uid {uid} still running: {left}"


@needs_namespaces
def test_a_main_process_ignoring_sigterm_is_killed_after_the_grace_and_counted(world):
    """The reverse of the test above: the main process ignores SIGTERM and its setsid child obeys it. The
    reaper kills what outlived the grace period and counts it, so the count does not depend on timing."""
    beat = world["ws"] / "beat2"
    conf = _conf(world["ws"], timeout_s=2.0, grace_s=1.0)
    t0 = time.monotonic()
    res, out, err = _python(world["tmp"], f"""
        import os, signal, time
        if os.fork() == 0:
            os.setsid()
            while True:
                open("{beat}", "w").write(str(time.time())); time.sleep(0.1)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """, conf)
    elapsed = time.monotonic() - t0
    assert res.status == "timeout" and res.exit_code == 128 + 9, (res, err)   # SIGKILL, after the grace
    assert elapsed < 2.0 + 1.0 + 5.0
    assert res.stragglers_killed >= 1
    last = beat.read_text()
    time.sleep(0.5)
    assert beat.read_text() == last, "a child outlived the timeout"


@needs_namespaces
def test_daemon_left_behind_dies_with_the_main_process(world):
    beat = world["ws"] / "daemon"
    res, _, err = _python(world["tmp"], f"""
        import os, time
        if os.fork() == 0:
            if os.fork() == 0:
                os.setsid()
                while True:
                    open("{beat}", "w").write(str(time.time())); time.sleep(0.1)
            os._exit(0)
        time.sleep(0.5)
    """, _conf(world["ws"]))
    assert res.status == "exited" and res.exit_code == 0, err
    assert res.stragglers_killed >= 1
    last = beat.read_text()
    time.sleep(0.5)
    assert beat.read_text() == last


@needs_namespaces
def test_terminate_from_the_caller_and_json_lines_pipes(world):
    proc = spawn_confined([sys.executable, "-c", "import sys\nfor l in sys.stdin:\n print(l.strip()[::-1], flush=True)"],
                          _conf(world["ws"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for word in ("lithium", "imide"):
        proc.stdin.write(word + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == word[::-1]
    res = proc.terminate()
    assert res.status == "terminated" and proc.poll() is not None


@needs_namespaces
@needs_root
def test_cpu_set_cannot_be_widened_and_cpu_time_is_counted(world):
    allowed = sorted(os.sched_getaffinity(0))[:1]
    res, out, err = _python(world["tmp"], """
        import os, time
        try:
            os.sched_setaffinity(0, set(range(os.cpu_count())))
        except OSError:
            pass
        t = time.process_time()
        while time.process_time() - t < 0.4:
            pass
        print(sorted(os.sched_getaffinity(0)))
    """, _conf(world["ws"], cpus=tuple(allowed)))
    assert res.exit_code == 0, err
    assert json.loads(out) == allowed
    assert res.cpu_s is not None and res.cpu_s >= 0.35
    assert res.peak_memory_mib is not None and res.peak_memory_mib > 1
    assert res.method["cgroup"] is True


@needs_namespaces
@needs_root
def test_without_root_a_user_namespace_gives_the_same_boundary(world):
    """The caller itself confined as an unprivileged user: its own sandbox then uses a user namespace."""
    inner_ws = world["ws"] / "inner"
    inner_ws.mkdir()
    os.chmod(world["ws"], 0o777)
    os.chmod(inner_ws, 0o777)
    driver = world["tmp"] / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from mdbench.sandbox import Confinement, capabilities, run_confined, runtime_paths
        caps = capabilities()
        res = run_confined([sys.executable, "-c", "print(open('{world['private']}/answers.json').read())"],
                           Confinement(workdir=Path("{inner_ws}"), env={{}}, readonly=runtime_paths(),
                                       hidden=(Path("{world['private']}"),)),
                           stdout=Path("{inner_ws}/o"), stderr=Path("{inner_ws}/e"))
        print(json.dumps({{"caps": caps, "status": res.status, "code": res.exit_code, "method": res.method}}))
    """))
    os.chmod(driver, 0o644)
    pythonpath = str(Path(__file__).resolve().parents[1] / "lib")
    res, out, err = _python(world["tmp"], f"import runpy; runpy.run_path('{driver}', run_name='__main__')",
                            _conf(world["ws"], readonly=(driver, *runtime_paths()),
                                  env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath}))
    assert res.exit_code == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["caps"]["root"] is False
    if not r["caps"]["namespaces"]:
        pytest.skip(f"user namespaces refused inside the sandbox: {r['caps'].get('namespace_error')}")
    assert r["method"]["user_namespace"] is True and r["method"]["isolation"] == "namespaces"
    assert r["code"] != 0 and "0.42" not in (inner_ws / "o").read_text()


def test_bad_confinements_are_clear_errors(tmp_path):
    with pytest.raises(SandboxError, match="not absolute"):
        spawn_confined(["true"], Confinement(workdir=Path("relative"), env={}))
    with pytest.raises(SandboxError, match="does not exist"):
        spawn_confined(["true"], Confinement(workdir=tmp_path, env={}, readonly=(tmp_path / "nope",)))
    with pytest.raises(SandboxError, match="empty command"):
        spawn_confined([], Confinement(workdir=tmp_path, env={}))


def test_missing_program_is_one_line_and_127(tmp_path):
    err = tmp_path / "err"
    res = run_confined([str(tmp_path / "no-such-agent")], _conf(tmp_path), stderr=err)
    assert res.exit_code == 127
    assert err.read_text().strip().count("\n") == 0 and "cannot start" in err.read_text()


def test_runtime_paths_let_python_start(tmp_path):
    res = run_confined([sys.executable, "-c", "import mdbench, numpy"], _conf(tmp_path), stderr=tmp_path / "e")
    assert res.exit_code == 0, (tmp_path / "e").read_text()


def test_concurrent_sandboxes_keep_their_own_results(tmp_path):
    results: dict[int, int | None] = {}

    def one(i: int) -> None:
        ws = tmp_path / f"w{i}"
        ws.mkdir()
        results[i] = run_confined([sys.executable, "-c", f"raise SystemExit({i + 3})"], _conf(ws)).exit_code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: 3, 1: 4, 2: 5}


@needs_namespaces
def test_minimal_root_hides_everything_but_the_system_and_what_is_exposed(world):
    """Top-level trees outside the system (homes, checkouts, reference outputs) show only what is exposed."""
    exposed = runtime_paths()
    non_system = sorted({p.parts[1] for p in exposed if p.parts[1] not in SYSTEM_DIRS})
    res, out, err = _python(world["tmp"], f"""
        import json, os
        def walk(top, depth):
            return {{e: (walk(os.path.join(top, e), depth - 1) if depth and os.path.isdir(os.path.join(top, e))
                         else None) for e in os.listdir(top)}}
        print(json.dumps({{t: walk("/" + t, 2) for t in {non_system!r}}}))
    """, _conf(world["ws"], minimal_root=True, private_tmp=False))
    assert res.exit_code == 0, err
    seen = json.loads(out)

    def names(tree, prefix=()):
        for name, sub in tree.items():
            yield prefix + (name,)
            if sub:
                yield from names(sub, prefix + (name,))

    for top in non_system:
        for parts in names(seen[top], (top,)):
            # every visible entry is inside an exposed path, or a folder on the way to one
            assert any(p.parts[1:1 + len(parts)] == parts or parts[:len(p.parts) - 1] == p.parts[1:]
                       for p in exposed), "/" + "/".join(parts)
    assert "_report" not in res.method


@needs_root
@needs_namespaces
def test_a_workdir_kept_by_its_owner_cannot_be_rearranged(world):
    """chown_workdir=False: frozen inputs at the workdir's top level cannot be renamed away by the agent."""
    ws = world["ws"]
    (ws / "runs").mkdir()
    (ws / "runs" / "input.txt").write_text("frozen\n")
    os.chmod(ws, 0o755)
    out = ws / "out"
    out.mkdir()
    code = """
        import os
        for op in (lambda: os.rename("runs", "runs.old"), lambda: open("new.txt", "w")):
            try:
                op(); print("done")
            except OSError:
                print("refused")
        open("out/result.txt", "w").write("ok")
    """
    res, stdout, _ = _python(world["tmp"], code, _conf(ws, writable=(out,), chown_workdir=False))
    assert res.exit_code == 0
    assert stdout.split() == ["refused", "refused"]
    assert (ws / "runs" / "input.txt").read_text() == "frozen\n" and (out / "result.txt").read_text() == "ok"
    assert os.stat(ws).st_uid == 0


# ------------------------------------------------------------------------- private state, limits, lifetime

@needs_namespaces
def test_nothing_stashed_in_shared_tmp_folders_reaches_the_next_session(world):
    """Repeat 1 hides its answers in /tmp, /dev/shm, /var/tmp and /run/lock; repeat 2 finds none of them, the
    host's folders are untouched, and System V IPC and the host name are the sandbox's own."""
    stash = """
        import os, socket
        found = []
        for d in ("/tmp", "/dev/shm", "/var/tmp", "/run/lock"):
            p = os.path.join(d, "stash-from-repeat-1")
            if os.path.exists(p):
                found.append(p)
            try:
                with open(p, "w") as fh:
                    fh.write("answers")
            except OSError as exc:
                found.append(f"unwritable {d}: {exc}")
        print("FOUND", found)
        print("IPC", os.stat("/proc/self/ns/ipc").st_ino, "UTS", socket.gethostname())
    """
    first = _python(world["tmp"], stash, _conf(world["ws"]))
    second = _python(world["tmp"], stash, _conf(world["ws"]))
    for res, out, err in (first, second):
        assert res.exit_code == 0, err
        assert "FOUND []" in out, out
        assert res.method["ipc_namespace"] and res.method["limits"]["private_paths"]
    assert f"IPC {os.stat('/proc/self/ns/ipc').st_ino} " not in second[1]
    assert "UTS mdbench-sandbox" in second[1]
    for d in ("/tmp", "/dev/shm", "/var/tmp", "/run/lock"):
        assert not os.path.exists(os.path.join(d, "stash-from-repeat-1"))


@needs_namespaces
def test_private_tmp_has_its_size_cap(world):
    res, out, err = _python(world["tmp"], """
        import os
        st = os.statvfs("/tmp")
        print("TMP_MIB", st.f_blocks * st.f_frsize // 2**20)
        st = os.statvfs("/dev/shm")
        print("SHM_MIB", st.f_blocks * st.f_frsize // 2**20)
    """, _conf(world["ws"], tmp_size_mib=32, shm_size_mib=8))
    assert res.exit_code == 0, err
    assert "TMP_MIB 32" in out and "SHM_MIB 8" in out
    assert res.method["limits"]["tmp_size_mib"] == 32


@needs_root
@needs_namespaces
def test_pids_and_memory_limits_hold_and_are_recorded(world):
    res, out, err = _python(world["tmp"], """
        import os, subprocess, time
        kids, refused = [], 0
        for i in range(200):
            try:
                kids.append(subprocess.Popen(["sleep", "30"]))
            except OSError:
                refused += 1
        print("STARTED", len(kids), "REFUSED", refused, flush=True)
        try:
            blob = bytearray(400 * 2**20)
            for i in range(0, len(blob), 4096):
                blob[i] = 1
            print("ALLOCATED", flush=True)
        except MemoryError:
            print("MEMORYERROR", flush=True)
    """, _conf(world["ws"], pids_max=40, memory_mib=200, timeout_s=60))
    started = int(out.split("STARTED ")[1].split()[0])
    assert started < 40 and "REFUSED 0" not in out, out + err
    assert "ALLOCATED" not in out  # killed by the OOM killer or refused
    assert res.method["limits"]["pids_max"] == 40 and res.method["limits"]["memory_mib"] == 200


@needs_namespaces
def test_a_flood_on_stderr_keeps_head_and_tail_within_the_cap(world):
    res, out, err = _python(world["tmp"], """
        import sys
        sys.stderr.write("FIRST LINE\\n")
        chunk = "x" * 65535 + "\\n"
        for _ in range(800):          # ~50 MB
            sys.stderr.write(chunk)
        sys.stderr.write("LAST LINE\\n")
    """, _conf(world["ws"], output_cap_bytes=1 << 20))
    assert res.exit_code == 0
    data = (world["tmp"] / "stderr.txt").read_bytes()
    assert len(data) < (1 << 20) + 200
    assert data.startswith(b"FIRST LINE") and data.rstrip().endswith(b"LAST LINE")
    assert b"bytes cut here" in data and res.method["limits"]["output_cut_bytes"] > 40 * 2**20


@needs_namespaces
def test_loopback_listen_reaches_the_callers_server_and_nothing_else(world):
    outside = socket.socket()
    outside.bind(("127.0.0.1", 0))
    outside.listen(1)
    host_port = outside.getsockname()[1]
    conf = _conf(world["ws"], loopback_listen=(18080,), timeout_s=30)
    code = textwrap.dedent(f"""
        import socket
        s = socket.create_connection(("127.0.0.1", 18080), timeout=5)
        s.sendall(b"ping")
        print("GOT", s.recv(100).decode())
        for target in (("127.0.0.1", {host_port}), ("10.0.0.1", 80), ("127.0.0.1", 18081)):
            try:
                socket.create_connection(target, timeout=2)
                print("REACHED", target)
            except OSError as exc:
                print("BLOCKED", target)
    """)
    out = world["tmp"] / "o.txt"
    proc = spawn_confined([sys.executable, "-c", code], conf, stdout=out, stderr=world["tmp"] / "e.txt")
    assert set(proc.listeners) == {18080}
    listener = proc.listeners[18080]
    listener.settimeout(20)
    conn, _ = listener.accept()
    conn.sendall(b"pong:" + conn.recv(100))
    conn.close()
    res = proc.wait()
    outside.close()
    text = out.read_text()
    assert res.exit_code == 0, (world["tmp"] / "e.txt").read_text()
    assert "GOT pong:ping" in text and "REACHED" not in text and text.count("BLOCKED") == 3


_CALLER = """
import sys, time
from pathlib import Path
from mdbench.sandbox import Confinement, runtime_paths, spawn_confined
ws = Path(sys.argv[1])
code = (
    "import os, signal, subprocess, time\\n"
    "subprocess.Popen(['sleep', '1000'], start_new_session=True)\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "print('READY', flush=True)\\n"
    "time.sleep(1000)\\n")
conf = Confinement(workdir=ws, env={"PATH": "/usr/bin:/bin"}, readonly=runtime_paths(), grace_s=1.0,
                   tag=sys.argv[2], timeout_s=600, workdir_quota_mib=int(sys.argv[3]) or None)
proc = spawn_confined([sys.executable, "-c", code], conf, stdout=ws / "out.txt", stderr=ws / "err.txt")
print(proc.pid, flush=True)
time.sleep(1000)
"""


def _tree_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout.split("\n")
    children: dict[int, list[int]] = {}
    for line in out:
        if line.strip():
            p, pp = map(int, line.split())
            children.setdefault(pp, []).append(p)
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children.get(p, []))
    return seen


@needs_root
@needs_namespaces
@pytest.mark.parametrize("signum,quota_mib", [("SIGKILL", 0), ("SIGTERM", 0), ("SIGKILL", 32)],
                         ids=["SIGKILL", "SIGTERM", "SIGKILL-with-workdir-quota"])
def test_a_killed_caller_takes_the_tree_and_leaves_no_cgroup_or_tmp_folder(world, signum, quota_mib):
    caller_tmp = world["tmp"] / "caller-tmp"  # its own TMPDIR: other sandboxes on this machine do not count
    caller_tmp.mkdir()
    tag = f"orphan-test-{os.getpid()}-{time.monotonic_ns()}"
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, str(world["ws"]), tag, str(quota_mib)],
                              stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "TMPDIR": str(caller_tmp),
                                              "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "lib")})
    supervisor = int(caller.stdout.readline())
    deadline = time.monotonic() + 30
    while "READY" not in (world["ws"] / "out.txt").read_text() if (world["ws"] / "out.txt").exists() else True:
        assert time.monotonic() < deadline, "the confined command never started"
        time.sleep(0.1)
    tree = _tree_of(supervisor)
    assert len(tree) >= 4  # supervisor, reaper, the command, its setsid sleeper
    new_folders = set(caller_tmp.glob("mdbench-sandbox-*"))
    assert new_folders and all(not (f / "spec.json").exists() for f in new_folders), "spec.json (the agent's env) left on disk"
    caller.send_signal(getattr(signal_module(), signum))
    caller.wait(10)
    deadline = time.monotonic() + 15  # grace 1 s, poll 0.5 s, generous for a loaded machine
    while any(Path(f"/proc/{p}").exists() and _state(p) not in ("Z", "X") for p in tree):
        assert time.monotonic() < deadline, f"the tree outlived its caller: {[p for p in tree if _state(p)]}"
        time.sleep(0.2)
    time.sleep(0.5)
    left = [d for c in ("cpuacct", "memory", "pids") for d in (Path("/sys/fs/cgroup") / c).glob(f"mdbench-{tag}-*")]
    assert not left, left
    assert not list(caller_tmp.iterdir())
    if quota_mib:  # the image was mounted in the dead namespace only: no mount, no loop device, no image left
        assert loop_devices_under(world["tmp"]) == [] and mounts_under(world["tmp"]) == []
        assert not list(world["tmp"].glob(".*.img"))




@needs_root
@needs_namespaces
def test_a_workdir_quota_stops_writes_at_the_quota_and_the_tree_comes_back_intact(world):
    """One big file and many small ones past a 32 MiB quota get ENOSPC; what was written comes back to the host
    with its holes, links and FIFOs as they were (nothing followed, nothing inflated), and nothing stays mounted."""
    ws = world["ws"]
    (ws / "given.txt").write_text("given\n")
    conf = _conf(ws, readonly=(world["frozen"], *runtime_paths()), workdir_quota_mib=32, timeout_s=60)
    res, out, err = _python(world["tmp"], """
        import errno, json, os
        got = {"view": open("given.txt").read()}
        os.unlink("given.txt")  # the caller's file (root's): replaced, as in a bound workdir
        with open("given.txt", "w") as f:
            f.write("changed by the command")
        def fill(path, size):
            n = 0
            try:
                with open(path, "wb") as f:
                    while n < size:
                        f.write(b"x" * 65536); f.flush(); n += 65536
            except OSError as exc:
                return ("ENOSPC" if exc.errno == errno.ENOSPC else exc.strerror, n)
            return ("ok", n)
        got["big"] = fill("big.bin", 100 * 2**20)
        os.unlink("big.bin")
        os.mkdir("many")
        made = 0
        try:
            for i in range(100000):
                with open(f"many/f{i}", "wb") as f:
                    f.write(b"y" * 4096)
                made += 1
        except OSError as exc:
            got["many"] = (exc.strerror, made)
        import shutil
        shutil.rmtree("many")
        try:  # the quota counts logical sizes (issue 48): a sparse file is as big as it says
            with open("huge.bin", "wb") as f:
                f.truncate(2**40)
            got["huge"] = "ok"
        except OSError as exc:
            got["huge"] = errno.errorcode.get(exc.errno, str(exc.errno))
        with open("sparse.bin", "wb") as f:
            f.truncate(16 * 2**20)
        with open("data.bin", "wb") as f:
            f.write(b"d" * 100000)
        for i in range(50):
            os.link("data.bin", f"link{i}")
        os.symlink("/etc/shadow", "shadow")
        os.mkfifo("pipe")
        os.makedirs("a/b/c")
        print(json.dumps(got))
    """, conf)
    assert res.status == "exited" and res.exit_code == 0, err
    got = json.loads(out)
    assert got["view"] == "given\n"  # the workdir's contents are in the image
    assert got["big"][0] == "ENOSPC" and got["big"][1] <= 32 * 2**20, got
    assert got["many"][0] == "No space left on device" and got["many"][1] < 32 * 2**20 // 4096, got
    quota = res.method["limits"]["workspace_quota"]
    assert quota["method"] == "loop_ext4" and quota["quota_mib"] == 32 and "error" not in quota, quota
    assert got["huge"] == "EFBIG", got
    assert not (ws / "huge.bin").exists() or (ws / "huge.bin").stat().st_size == 0
    assert (ws / "sparse.bin").stat().st_size == 16 * 2**20 and (ws / "sparse.bin").stat().st_blocks == 0
    assert (ws / "data.bin").read_bytes() == b"d" * 100000 and (ws / "data.bin").stat().st_nlink == 51
    assert os.readlink(ws / "shadow") == "/etc/shadow" and (ws / "shadow").is_symlink()
    assert (ws / "pipe").is_fifo() and (ws / "a" / "b" / "c").is_dir() and not (ws / "many").exists()
    assert (ws / "given.txt").read_text() == "changed by the command"  # what was there shows its new state
    assert quota["fifos"] == 1 and quota["symlinks"] == 1 and quota["hardlinks"] == 50
    assert loop_devices_under(world["tmp"]) == [] and mounts_under(world["tmp"]) == []
    assert not list(world["tmp"].glob(".*.img"))


def signal_module():
    import signal
    return signal


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2:][:1]


@needs_namespaces
def test_without_loop_devices_the_quota_falls_back_to_a_poll_that_ends_the_tree(world, monkeypatch):
    """Where no loop device can be had (no root, a container without /dev/loop-control): each file is capped by
    RLIMIT_FSIZE and a poll of the workdir ends a tree that wrote past the quota in many files."""
    from mdbench import sandbox_quota

    monkeypatch.setattr(sandbox_quota, "available", lambda: (False, "refused for this test"))
    conf = _conf(world["ws"], workdir_quota_mib=16, timeout_s=120, grace_s=1.0)
    res, out, err = _python(world["tmp"], """
        import time
        print("START", flush=True)
        for i in range(13):
            with open(f"part{i}.bin", "wb") as f:
                f.write(b"x" * (4 * 2**20))
        time.sleep(120)
    """, conf)
    quota = res.method["limits"]["workspace_quota"]
    assert "START" in out, err
    assert quota["method"] == "poll_and_rlimit_fsize" and quota["why_not_loop"] == "refused for this test"
    assert res.method["limits"]["file_size_max_mib"] == 16  # one file cannot pass the quota
    assert quota["quota_reached"] and quota["used_bytes"] > 16 * 2**20, quota
    assert res.wall_s < 60 and res.exit_code != 0  # ended by the poll, long before its sleep or the timeout


@needs_namespaces
def test_minimal_root_denies_var_and_opt_but_keeps_a_private_var_tmp_and_what_is_exposed(tmp_path):
    """Issue 48: another episode under /var/lib (or /opt) is not visible; an exposed folder there is."""
    if not os.access("/var/lib", os.W_OK):
        pytest.skip("needs a writable /var/lib (root)")
    base = Path(tempfile.mkdtemp(prefix="mdbench-rt48-", dir="/var/lib"))
    try:
        os.chmod(base, 0o755)
        other, mine = base / "cfgB", base / "cfgA"
        (other / "workspace").mkdir(parents=True)
        (other / "workspace" / "report.md").write_text("someone else's run")
        (mine / "workspace").mkdir(parents=True)
        os.chmod(mine / "workspace", 0o777)
        code = f"""
            import json, os
            print(json.dumps({{"other": os.path.exists({str(other / 'workspace' / 'report.md')!r}),
                              "var_lib": os.listdir("/var/lib") if os.path.isdir("/var/lib") else None,
                              "opt": os.listdir("/opt") if os.path.isdir("/opt") else None,
                              "base": os.listdir({str(base)!r}),
                              "var_tmp_writable": os.access("/var/tmp", os.W_OK),
                              "mine": os.access(os.getcwd(), os.W_OK)}}))
        """
        res, out, err = _python(tmp_path, code, _conf(mine / "workspace", minimal_root=True))
        assert res.exit_code == 0, err
        seen = json.loads(out)
        # only the way to the exposed workspace exists (empty mount points), nothing of /var/lib or /opt itself
        assert seen["other"] is False and seen["var_lib"] == [base.name] and seen["base"] == ["cfgA"], seen
        assert not seen["opt"], seen
        assert seen["var_tmp_writable"] and seen["mine"], seen
    finally:
        shutil.rmtree(base, ignore_errors=True)
