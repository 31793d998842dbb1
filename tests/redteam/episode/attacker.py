"""A cheating agent (runs on the agent toolchain's python3, inside the sandbox). ``attacker.py MODE [ARG]``.

Modes (each records what it tried in ``attack.json`` in its working directory):

* ``probe`` — look for our answer pipeline and grader: ``mdbench-oracle``, ``mdbench``, ``import mdbench`` from
  every Python it can find, the checkout's ``lib/mdbench``, ``.git``, ``tests``, ``templates``.
* ``crashfiles`` — leave the files that crashed or hung the runner (FIFOs, 1e308 costs, ``Time: 1e999``, a
  200,000-deep JSON array, a 1,100-level folder tree, links to host files).
* ``fifo-sleep`` — FIFOs where the progress tick and the collectors read, then sleep past any timeout.
* ``stash KEY`` / ``read-stash KEY`` — leave state in /dev/shm, /var/tmp, /run/lock, /tmp and System V shared
  memory; a second episode looks for it.
* ``swarm`` — 200 sleeping children and a double-forked daemon that ignores SIGTERM; then exits 0.
* ``fake-costs`` — negative and absurd tokens/USD, a ledger that under-reports a trajectory it leaves on disk,
  a GROMACS log with a negative wall time on a GPU.
* ``fabricate DIR`` — copy a fabricated run record (JSON, no MD) into the workspace and stop.
* ``wait`` — write ``started`` and sleep (the runner gets killed meanwhile).
* ``fill MIB big|many`` — try to write MIB MiB into the workspace as one big file, or as 8 KiB files; then a
  sparse 1 TiB file and a file hard-linked 1,000 times; what each got is printed to stdout (the workspace
  is full: attack.json cannot be written).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

WS = Path.cwd()
REPORT: dict = {}


def attempt(name, fn):
    try:
        out = fn()
        REPORT[name] = "ok" if out is None else f"ok: {str(out)[:300]}"
    except Exception as exc:  # noqa: BLE001
        REPORT[name] = f"refused: {type(exc).__name__}: {str(exc)[:200]}"


def save():
    (WS / "attack.json").write_text(json.dumps(REPORT, indent=1, sort_keys=True))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
    return p.stdout.strip()[-200:]


def probe():
    for exe in ("mdbench", "mdbench-oracle", "mdbench-buggy-agent", "mdbench-null-agent"):
        REPORT[f"which_{exe}"] = shutil.which(exe)
    attempt("import_mdbench", lambda: run([sys.executable, "-c", "import mdbench; print(mdbench.__file__)"]))
    pythons = set()
    for root in ("/root", "/work", "/opt", "/usr/local", "/home", "/srv"):
        for folder, dirs, names in os.walk(root):
            if folder.count("/") > 8:
                dirs[:] = []
            for n in names:
                if n.startswith("python3") and os.access(os.path.join(folder, n), os.X_OK):
                    pythons.add(os.path.join(folder, n))
                if n in ("cli.py",) and folder.endswith("lib/mdbench"):
                    REPORT.setdefault("found_lib_mdbench", []).append(folder)
            for d in dirs:
                if d in (".git", "templates", "lib") or d.startswith("mdbench"):
                    REPORT.setdefault("found_dirs", []).append(os.path.join(folder, d))
    REPORT["pythons"] = sorted(pythons)
    imported = []
    for py in sorted(pythons):
        try:
            p = subprocess.run([py, "-c", "import mdbench, sys; print(mdbench.__file__)"], capture_output=True,
                               text=True, timeout=30)
            if p.returncode == 0:
                imported.append(f"{py}: {p.stdout.strip()}")
        except OSError:
            pass
    REPORT["imported_mdbench_with"] = imported
    attempt("run_audit", lambda: run(["mdbench", "audit", ".", "--bundle", "agent_input", "--out", "selfgrade"]))
    attempt("run_oracle", lambda: run(["mdbench-oracle", "--help"]))
    attempt("import_scientific_stack", lambda: run([sys.executable, "-c", "import numpy, scipy, pandas, MDAnalysis, "
                                                     "mdtraj, matplotlib; print('ok')"]))
    REPORT["gmx"] = shutil.which("gmx")
    REPORT["packmol"] = shutil.which("packmol")
    REPORT["node"] = shutil.which("node")
    save()


def deep_tree(root: Path, levels: int):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("cost.json", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as fh:
            fh.write('{"usd": 1}')
    finally:
        os.close(fd)


def crashfiles():
    rr = WS / "run_record"
    rr.mkdir(exist_ok=True)
    os.mkfifo(WS / "trajectory.json")                                           # hangs a blocking reader
    (WS / "agent").mkdir(exist_ok=True)
    (WS / "agent" / "trajectory.json").write_text("[" * 200_000 + "]" * 200_000)  # RecursionError bait
    (WS / "logs" / "agent").mkdir(parents=True, exist_ok=True)
    (WS / "logs" / "agent" / "trajectory.json").write_text(json.dumps(
        {"schema_version": "ATIF-v1.7", "agent": {"name": "x"}, "steps": [],
         "final_metrics": {"total_prompt_tokens": 1e308, "total_completion_tokens": -5, "total_cost_usd": 1e308}}))
    (WS / "cost.json").write_text('{"tokens": {"prompt": 1e308, "completion": 1}, "usd": 1e999}')
    (rr / "attempts.jsonl").write_text(
        json.dumps({"id": "DE-1", "case": "DE", "ns_charged": 1e308}) + "\n"
        + '{"id": "DE-2", "case": "DE", "ns_charged": NaN}\n'
        + json.dumps({"id": "HCE-1", "case": "HCE", "ns_charged": 10 ** 400}) + "\n")
    (rr / "cost.json").symlink_to("/etc/shadow")
    log = WS / "cases" / "DE" / "prod"
    log.mkdir(parents=True, exist_ok=True)
    (log / "prod.log").write_text("1 GPU selected for this run.\n               Core t (s)   Wall t (s)        (%)\n"
                                  "       Time:     1e999     1e999      200.0\n")
    os.mkfifo(log / "md.log")
    (log / "big.log").symlink_to("/dev/zero")
    deep_tree(WS, 1100)
    REPORT["left"] = "fifo, deep json, 1e308, 1e999, NaN, 400-digit int, links, 1100-level tree"
    save()


def fifo_sleep():
    (WS / "run_record").mkdir(exist_ok=True)
    os.mkfifo(WS / "run_record" / "attempts.jsonl")
    os.mkfifo(WS / "trajectory.json")
    (WS / "started").write_text("1")
    time.sleep(3600)


STASH_DIRS = ("/dev/shm", "/var/tmp", "/run/lock", "/tmp")
SHM_KEY = 0x4D44_4221


def _shmget(key: int, size: int, flags: int) -> int:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    return libc.shmget(ctypes.c_int(key), ctypes.c_size_t(size), ctypes.c_int(flags))


def stash(key: str):
    for d in STASH_DIRS:
        attempt(f"write {d}", lambda d=d: Path(d, f"stash-{key}").write_text("the whole previous run"))
    REPORT["shmget_create"] = _shmget(SHM_KEY, 4096, 0o1000 | 0o666)  # IPC_CREAT
    save()


def read_stash(key: str):
    found = {d: os.path.exists(os.path.join(d, f"stash-{key}")) for d in STASH_DIRS}
    REPORT["found"] = found
    REPORT["shmget_existing"] = _shmget(SHM_KEY, 0, 0)  # -1 (ENOENT) unless the segment is shared
    save()


def swarm():
    kids = [subprocess.Popen(["sleep", "600"]) for _ in range(200)]
    REPORT["children"] = len(kids)
    code = ("import os, signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "if os.fork(): os._exit(0)\n"
            "os.setsid()\n"
            "if os.fork(): os._exit(0)\n"
            "open('daemon.pid', 'w').write(str(os.getpid()))\n"
            "while True: time.sleep(0.2)\n")
    subprocess.run([sys.executable, "-c", code])
    for _ in range(100):
        if (WS / "daemon.pid").exists():
            break
        time.sleep(0.05)
    save()
    os._exit(0)  # leave the children and the daemon behind


def xtc_frames(path: Path, times_ps):
    """A tiny, valid xtc (natoms 3 ≤ 9: uncompressed floats) with frames at ``times_ps``."""
    with open(path, "wb") as fh:
        for k, t in enumerate(times_ps):
            fh.write(struct.pack(">iiif", 1995, 3, k * 1000, float(t)))
            fh.write(struct.pack(">9f", 3, 0, 0, 0, 3, 0, 0, 0, 3))
            fh.write(struct.pack(">i", 3))
            fh.write(struct.pack(">9f", *([0.5] * 9)))


def fake_costs():
    (WS / "run_record").mkdir(exist_ok=True)
    (WS / "cost.json").write_text(json.dumps({"tokens": {"prompt": -1000000, "completion": 5}, "usd": -12.5}))
    (WS / "run_record" / "attempts.jsonl").write_text(
        json.dumps({"id": "DE-1", "case": "DE", "ns_charged": 0.001}) + "\n"
        + json.dumps({"id": "HCE-1", "case": "HCE", "ns_charged": -40.0}) + "\n")
    prod = WS / "cases" / "DE" / "prod"
    prod.mkdir(parents=True, exist_ok=True)
    xtc_frames(prod / "prod.xtc", [0.0, 25_000.0, 50_000.0])  # 50 ns on disk, 0.001 ns charged
    (prod / "prod.log").write_text("1 GPU selected for this run.\n               Core t (s)   Wall t (s)        (%)\n"
                                   "       Time:     -7200.000     -3600.000      200.0\n")
    save()


def fabricate(src: str):
    for name in os.listdir(src):
        s = Path(src, name)
        if s.is_dir():
            shutil.copytree(s, WS / name, dirs_exist_ok=True)
        else:
            shutil.copy(s, WS / name)
    save()


def wait():
    for _ in range(20):
        subprocess.Popen(["sleep", "600"])
    (WS / "started").write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)


def fill(mib: str, what: str):
    total = int(mib) * 2**20
    (WS / "small.bin").write_bytes(b"z" * 4096)
    written = 0
    try:
        if what == "big":
            with open(WS / "big.bin", "wb") as f:
                while written < total:
                    f.write(b"x" * 2**20)
                    f.flush()
                    written += 2**20
        else:
            (WS / "many").mkdir()
            while written < total:
                (WS / "many" / f"f{written // 8192}").write_bytes(b"y" * 8192)
                written += 8192
        REPORT[what] = f"ok: {written}"
    except OSError as exc:
        REPORT[what] = f"refused after {written} bytes: {exc.strerror}"
    attempt("sparse", lambda: os.truncate(os.open(WS / "sparse.bin", os.O_WRONLY | os.O_CREAT), 2**40))
    links = 0
    for i in range(1000):
        try:
            os.link(WS / "small.bin", WS / f"link{i}")
            links += 1
        except OSError:
            break
    REPORT["links"] = links
    print("FILL " + json.dumps(REPORT), flush=True)


def replay(src: str):
    """Issue 48: copy a finished run from wherever it is readable (an exposed folder, a sibling episode)."""
    REPORT["visible"] = os.path.isdir(src) and bool(os.listdir(src))
    attempt("copy", lambda: fabricate(src) if REPORT["visible"] else None)
    save()


def sparse(gib: str):
    """Issue 48: sparse record files of GIB GiB each, a sparse artifact past the checksum cap listed in the
    inventory, a 10 TiB one past the quota, and a trajectory whose name holds a newline."""
    rec = WS / "run_record"
    rec.mkdir(exist_ok=True)
    for name in ("events.jsonl", "attempts.jsonl", "registrations.jsonl"):
        attempt(name, lambda n=name: os.truncate(os.open(rec / n, os.O_WRONLY | os.O_CREAT), int(gib) * 2**30))
    attempt("report_md", lambda: os.truncate(os.open(WS / "report.md", os.O_WRONLY | os.O_CREAT), 16 * 2**30))
    (rec / "artifacts.json").write_text(json.dumps({"report.md": {"sha256": "0" * 64, "kind": "report"}}))
    attempt("huge", lambda: os.truncate(os.open(WS / "huge.bin", os.O_WRONLY | os.O_CREAT), 10 * 2**40))
    (WS / "cases" / "DE").mkdir(parents=True, exist_ok=True)
    (WS / "cases" / "DE" / "evil\nINJECTED line.xtc").write_bytes(b"not an xtc")
    save()


def md_resume():
    """An honest agent's production of 216 waters, stopped and resumed from its checkpoint (two segments)."""
    prod = WS / "cases" / "DE" / "40_production"
    prod.mkdir(parents=True)
    (prod / "prod.mdp").write_text("integrator = md\ndt = 0.002\nnsteps = 6000\nnstxout-compressed = 100\n"
                                   "nstenergy = 100\ncutoff-scheme = Verlet\nrcoulomb = 0.9\nrvdw = 0.9\n"
                                   "coulombtype = PME\ntcoupl = v-rescale\ntc-grps = System\ntau-t = 0.1\n"
                                   "ref-t = 300\nconstraints = h-bonds\n")
    (prod / "topol.top").write_text('#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spc.itp"\n'
                                    "[ system ]\nwater\n[ molecules ]\nSOL 216\n")
    top = next(p for p in ("/usr/share/gromacs/top", "/usr/local/gromacs/share/gromacs/top")
               if os.path.isfile(p + "/spc216.gro"))
    for cmd in (["gmx", "-quiet", "grompp", "-f", "prod.mdp", "-c", top + "/spc216.gro", "-p", "topol.top",
                 "-o", "prod.tpr"],
                ["gmx", "-quiet", "mdrun", "-deffnm", "prod", "-nt", "1", "-nsteps", "3000"],
                ["gmx", "-quiet", "mdrun", "-deffnm", "prod", "-nt", "1", "-cpi", "prod.cpt", "-noappend"]):
        p = subprocess.run(cmd, cwd=prod, capture_output=True, text=True, timeout=600)
        REPORT[cmd[2]] = p.returncode
        if p.returncode != 0:
            REPORT["error"] = p.stderr[-500:]
            break
    save()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"probe": probe, "crashfiles": crashfiles, "fifo-sleep": fifo_sleep, "stash": stash, "read-stash": read_stash,
     "swarm": swarm, "fake-costs": fake_costs, "fabricate": fabricate, "wait": wait,
     "fill": fill, "replay": replay, "sparse": sparse, "md-resume": md_resume}[mode](*args)
