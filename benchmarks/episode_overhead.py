"""Harness time outside the agent as a share of an oracle micro episode (audit excluded); target ≤ 1 %.

Usage::

    .venv/bin/python benchmarks/episode_overhead.py [--episode EP] [--repeats 7] [--workdir DIR] [--threads 2]

Without ``--episode`` the script prepares and runs one oracle episode on the micro preset (real GROMACS, all
three cases; 10–25 min on two shared cores); with it, it reuses a finished one. Then it measures, on that
episode:

* **before the agent** — from ``result.json`` (``harness_s.before_agent``: reading the episode, probing the
  sandbox, limits, environment, tool check, confinement);
* **confinement** — the sandbox's own start and end (supervisor, mounts, reaper, cgroups): a trivial agent
  (``/bin/true``) confined exactly as the episode's agent was, minus the same command started bare, interleaved
  ``--repeats`` times (medians);
* **after the agent** — the integrity check of ``agent_input/``, the cost files, the ledger and the GROMACS logs
  read back from the real workspace, and writing ``result.json`` (medians of ``--repeats``).

It prints each part, their sum, the episode's wall time without its audit, and the ratio. The audit is the
evaluation itself and is reported separately. Nothing here is a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import interleaved_times  # noqa: E402


def _run_oracle(work: Path, threads: int) -> Path:
    from mdbench.episode.runner import RunOptions, run_episode
    from mdbench.episode.workspace import prepare_episode

    ep = prepare_episode("micro", work / "oracle", {"harness": "reference", "model": "oracle", "repeat": 1})
    t0 = time.monotonic()
    print(f"running the oracle micro episode in {ep.root} (this takes minutes) …", flush=True)
    run_episode(ep.root, "oracle", RunOptions(threads=threads))
    print(f"oracle episode finished in {time.monotonic() - t0:.0f} s", flush=True)
    return ep.root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episode", type=Path, default=None, help="a finished oracle micro episode to reuse")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)

    from mdbench.episode import collect
    from mdbench.episode.runner import RunOptions, confinement_for, write_result, agent_env, agent_path
    from mdbench.episode.workspace import check_integrity, load_episode
    from mdbench.sandbox import run_confined

    work = args.workdir or Path(tempfile.mkdtemp(prefix="mdbench-episode-bench-"))
    ep_dir = args.episode or _run_oracle(work, args.threads)
    ep = load_episode(ep_dir)
    result = json.loads((ep.root / "result.json").read_text())
    if result["status"] != "completed" or result["agent"]["spec"] != "oracle":
        print(f"warning: {ep.root} is a {result['agent']['spec']} episode with status {result['status']}",
              file=sys.stderr)

    # confinement: a trivial agent confined like the episode's, against the same command bare
    threads = result["limits"]["threads"]
    env = agent_env(ep, threads, "", {}, agent_path())
    conf = confinement_for(ep, RunOptions(), env, result["limits"]["cpus"], 60.0, 1.0)
    logs = work / "bench-logs"
    logs.mkdir(parents=True, exist_ok=True)
    times = interleaved_times({
        "confined": lambda: run_confined(["/bin/true"], conf, stdout=logs / "o.log", stderr=logs / "e.log"),
        "bare": lambda: subprocess.run(["/bin/true"], check=True),
    }, args.repeats)
    confinement_s = statistics.median(times["confined"]) - statistics.median(times["bare"])

    # after the agent: the same reads the runner does, on the real workspace
    def after() -> None:
        check_integrity(ep, keep_evidence=False)
        listing = collect.workspace_walk(ep.workspace)
        collect.agent_costs(ep.workspace)
        collect.ns_charged(ep.workspace)
        collect.ns_on_disk(ep.workspace, listing)
        collect.gpu_hours(ep.workspace, listing)
        write_result(work / "result.json", result)

    after_times = interleaved_times({"after": after}, args.repeats)["after"]
    after_s = statistics.median(after_times)
    before_s = float(result["harness_s"]["before_agent"])
    harness_s = before_s + confinement_s + after_s
    episode_s = before_s + float(result["wall_s"]) + float(result["harness_s"]["after_agent"])
    ratio = harness_s / episode_s
    print(f"\nepisode {ep.episode_id} ({ep.root})")
    print(f"  agent wall time (confined, incl. sandbox start) {result['wall_s']:10.2f} s")
    print(f"  harness before the agent (result.json)          {before_s:10.3f} s")
    print(f"  confinement start + end (median of {args.repeats}, "
          f"confined {statistics.median(times['confined']):.3f} − bare {statistics.median(times['bare']):.3f}) "
          f"{confinement_s:8.3f} s")
    print(f"  harness after the agent (median of {args.repeats})          {after_s:10.3f} s "
          f"(in the run itself: {result['harness_s']['after_agent']:.3f} s)")
    print(f"  harness outside the agent                       {harness_s:10.3f} s")
    print(f"  episode without the audit                       {episode_s:10.2f} s")
    print(f"  audit (reported separately)                     {result['harness_s']['audit']:10.2f} s")
    print(f"\nharness / episode (audit excluded) = {ratio:.5f}  ({100 * ratio:.3f} %; target ≤ 1 %: "
          f"{'met' if ratio <= 0.01 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
