"""Reference agents: commands the episode runner launches like any other agent.

* ``mdbench-oracle`` — this project's own pipeline acting as an agent. It reads only ``agent_input/`` (the
  bundle's cases, force field and geometries: ``mdbench study run --bundle agent_input``), runs the study in
  its working directory and writes the run directory and the terminal claim. Its protocol choices (lengths,
  gates, estimators) are the pipeline's own. Its audit must match what its record claims: it proves the
  audit can award full marks. ``--until earned [--budget-ns N]`` (shorthand ``--agent oracle:earned``) runs
  the study as ``mdbench study run --until earned``: production extended segment by segment while a required
  SI result is projected earned within the budget (issue 46). The default stays ``fixed`` (the preset's
  production length): an episode has a wall-clock limit, and earned production may extend towards the
  registered 100 ns per case, far past a micro or tiny episode's time; give ``--budget-ns`` to cap it.
* ``mdbench-null-agent`` — writes nothing and exits 0: every case is ``not_reached``, there is no claim.
* ``mdbench-buggy-agent KIND`` — the oracle followed by one scripted defect of seed §4.3
  (:mod:`mdbench.episode.defects`).

Each is also ``python -m mdbench.episode.agents {oracle|null|buggy KIND}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CASES = ("DE", "HCE", "LHCE")
#: What a replayed oracle run copies (``--from-run``): the run directory's own files, never agent_input/.
RUN_ENTRIES = ("run_record", "cases", "analysis", "notebooks", "report.md")


def _threads() -> int:
    """The agent's thread allowance: ``$MDBENCH_THREADS``, else the CPUs it may run on."""
    env = os.environ.get("MDBENCH_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _write_cost(out: Path, agent: str) -> None:
    """A ``cost.json``: the reference agents call no language model (0 tokens, 0 USD)."""
    doc = {"agent": agent, "model": None, "tokens": {"prompt": 0, "completion": 0, "total": 0}, "usd": 0.0,
           "note": "reference agent: no language model calls"}
    (out / "cost.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def share_readable(out: Path) -> int:
    """Make the run directory this agent wrote readable by every account (folders 0755-ish, files +r), so a
    replay (``--from-run``) works under any ``--user``; symlinks are left alone. Returns entries changed.

    The pipeline creates some folders 0700 (``mkdtemp`` then rename); the reference agent fixes that for its
    own files only — it never touches ``agent_input/``.
    """
    import stat  # noqa: PLC0415

    changed = 0
    for folder, dirs, names in os.walk(out, followlinks=False):
        dirs[:] = [d for d in dirs if d != "agent_input"]
        for name, bits in [*((d, 0o555) for d in dirs), *((n, 0o444) for n in names)]:
            p = Path(folder) / name
            try:
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
                    continue
                if (st.st_mode & bits) != bits:
                    os.chmod(p, stat.S_IMODE(st.st_mode) | bits)
                    changed += 1
            except OSError:
                continue
    return changed


#: How long the oracle produces: the preset's length, or until each result is earned (``study run --until``).
UNTIL = ("fixed", "earned")


def study_command(bundle: Path, out: Path, threads: int, systems: tuple[str, ...] = CASES, seed: int = 2026,
                  until: str = "fixed", budget_ns: float | None = None) -> list[str]:
    """The oracle's ``mdbench study run`` command line (``until``/``budget_ns``: ``--until``/``--budget-ns``)."""
    if until not in UNTIL:
        raise ValueError(f"until must be one of {UNTIL}, not {until!r}")
    workers = max(1, min(len(systems), threads))
    per_job = max(1, threads // workers)
    cmd = [sys.executable, "-m", "mdbench.cli", "study", "run", "--bundle", str(bundle), "--out", str(out),
           "--systems", *systems, "--threads", str(per_job), "--workers", str(workers), "--seed", str(seed),
           "--quiet"]
    if until == "earned":
        cmd += ["--until", "earned"] + (["--budget-ns", f"{budget_ns:g}"] if budget_ns is not None else [])
    return cmd


def run_oracle(bundle: Path, out: Path, threads: int, systems: tuple[str, ...] = CASES, seed: int = 2026,
               until: str = "fixed", budget_ns: float | None = None) -> int:
    """Verify the bundle, then ``mdbench study run --bundle`` (:func:`study_command`) into ``out``; 0 once a
    terminal claim exists.

    The study's own exit status is 1 whenever a stage or observable ends unresolved; for an agent that is
    a scientific outcome recorded in its claim, not a crash, so the oracle exits 0 when it wrote the claim.
    """
    from mdbench.errors import InputError  # noqa: PLC0415
    from mdbench.inputs.bundle import load_bundle_inputs  # noqa: PLC0415

    try:
        load_bundle_inputs(bundle)
    except InputError as exc:
        print(f"mdbench-oracle: input integrity check failed, stopping: {exc}", file=sys.stderr)
        return 3
    cmd = study_command(bundle, out, threads, systems, seed, until, budget_ns)
    print("mdbench-oracle:", " ".join(cmd[2:]), flush=True)
    code = subprocess.call(cmd)
    _write_cost(out, "mdbench-oracle")
    share_readable(out)
    claimed = (out / "run_record" / "episode_terminal.json").is_file()
    print(f"mdbench-oracle: study exit {code}; terminal claim {'written' if claimed else 'missing'}", flush=True)
    return 0 if claimed else (code or 1)


def replay_run(source: Path, out: Path) -> None:
    """Copy a finished oracle run's own files (:data:`RUN_ENTRIES`) into ``out`` (symlinks kept as links)."""
    for name in RUN_ENTRIES:
        src = source / name
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, out / name, symlinks=True, dirs_exist_ok=True)
        elif src.is_file() and not src.is_symlink():
            shutil.copy2(src, out / name)


def _oracle_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, default=Path("agent_input"), help="the read-only input bundle")
    p.add_argument("--out", type=Path, default=Path("."), help="run directory to write (default: here)")
    p.add_argument("--threads", type=int, default=None, help="threads in total (default $MDBENCH_THREADS)")
    p.add_argument("--systems", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--until", choices=UNTIL, default="fixed",
                   help="fixed: the preset's production length (default); earned: extend production while a "
                        "required result is projected earned within the budget (mdbench study run --until earned)")
    p.add_argument("--budget-ns", type=float, default=None,
                   help="with --until earned: cap on the study's MD [ns] (default the registered 300 ns)")
    return p


def oracle_main(argv: list[str] | None = None) -> int:
    """``mdbench-oracle``."""
    args = _oracle_parser("mdbench-oracle").parse_args(argv)
    if args.budget_ns is not None and (args.until != "earned" or not args.budget_ns > 0):
        print("mdbench-oracle: --budget-ns needs --until earned and a positive number of ns", file=sys.stderr)
        return 2
    return run_oracle(args.bundle, args.out.resolve(), args.threads or _threads(), tuple(args.systems), args.seed,
                      args.until, args.budget_ns)


def null_main(argv: list[str] | None = None) -> int:
    """``mdbench-null-agent``: does nothing."""
    argparse.ArgumentParser(prog="mdbench-null-agent", description="Writes nothing and exits 0.").parse_args(argv)
    print("mdbench-null-agent: writing nothing", flush=True)
    return 0


def buggy_main(argv: list[str] | None = None) -> int:
    """``mdbench-buggy-agent KIND``: the oracle (or a replay of a finished oracle run), then one defect."""
    from mdbench.episode.defects import DEFECTS, apply_defect  # noqa: PLC0415

    p = _oracle_parser("mdbench-buggy-agent")
    p.add_argument("kind", choices=sorted(DEFECTS), help="the scripted defect (seed §4.3)")
    p.add_argument("--from-run", type=Path, default=None,
                   help="replay this finished oracle run instead of simulating (it must be readable here)")
    args = p.parse_args(argv)
    out = args.out.resolve()
    if args.from_run is not None:
        replay_run(args.from_run, out)
        _write_cost(out, "mdbench-buggy-agent")
        print(f"mdbench-buggy-agent: replayed {args.from_run}", flush=True)
    else:
        code = run_oracle(args.bundle, out, args.threads or _threads(), tuple(args.systems), args.seed,
                          args.until, args.budget_ns)
        if code != 0:
            return code
    changed = apply_defect(out, args.kind)
    print(f"mdbench-buggy-agent: defect {args.kind}: {DEFECTS[args.kind].summary}; changed {len(changed)} file(s)",
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m mdbench.episode.agents {oracle|null|buggy} …``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    agents = {"oracle": oracle_main, "null": null_main, "buggy": buggy_main}
    if not argv or argv[0] not in agents:
        print("usage: python -m mdbench.episode.agents {oracle|null|buggy KIND} [options]", file=sys.stderr)
        return 2
    return agents[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
