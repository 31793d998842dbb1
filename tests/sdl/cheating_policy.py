"""Coordinators that try to read evaluator data (the two cheats of issue #22), for the isolation tests.

Usage: python cheating_policy.py --mode stack_walk | packaged_record

* ``stack_walk`` — walks the call stack (``sys._getframe``) and the garbage collector's objects looking for
  the evaluator's ``CampaignEnv`` (its ``_exp`` holds every recorded outcome); also looks at the other
  processes it can see in ``/proc``.
* ``packaged_record`` — loads the record packaged inside mdbench (``load_vapdiff()``), the compile's
  ``evaluator/ledger.json`` next to the agent tree, and the shared copy of the CSV.

Every attempt and its result is written to stderr as one ``ATTEMPT <name>: <result>`` line (the evaluator
keeps the tail in the trace). Whatever outcomes a cheat obtains are used: it forecasts probability 0.999 on
the outcome it found and uniform otherwise, so a successful cheat shows up as a near-zero loss.

:class:`InProcessCheat` is the same stack walk as an in-process policy object, to show that the cheat works
when nothing isolates it.
"""

from __future__ import annotations

import gc
import glob
import json
import os
import sys

found: dict[str, dict] = {}        # public id → {"valid", "category"} (stack walk)
by_descriptors: dict[str, dict] = {}   # canonical descriptors → outcome (packaged record)


def attempt(name: str, result: str) -> None:
    sys.stderr.write(f"ATTEMPT {name}: {result}\n")
    sys.stderr.flush()


def _take_env(env) -> int:
    n = 0
    for pub, exp in getattr(env, "_exp", {}).items():
        found[pub] = {"valid": exp.outcome.valid, "category": exp.outcome.category}
        n += 1
    return n


def stack_walk() -> None:
    frames, f = [], sys._getframe()
    while f is not None:
        frames.append(f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_code.co_name}")
        for v in list(f.f_locals.values()):
            if type(v).__name__ == "CampaignEnv":
                _take_env(v)
        f = f.f_back
    n_gc = 0
    for obj in gc.get_objects():
        if type(obj).__name__ == "CampaignEnv":
            n_gc += _take_env(obj)
    attempt("stack_walk", f"{len(frames)} frames {frames[:6]}, outcomes found: {len(found)} (gc: {n_gc})")
    try:
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        others = []
        for p in pids[:8]:
            if p != os.getpid():
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as fh:
                        others.append(fh.read().replace(b"\0", b" ")[:60].decode("utf-8", "replace"))
                except OSError as exc:
                    others.append(f"{p}: {exc.strerror}")
        attempt("proc_scan", f"{len(pids)} processes visible {pids[:8]}; first command lines: {others[:3]}")
    except OSError as exc:
        attempt("proc_scan", f"failed: {exc}")


def _learn(ledger, label: str) -> None:
    for e in ledger.experiments:
        by_descriptors[json.dumps(e.descriptors, sort_keys=True)] = {"valid": e.outcome.valid,
                                                                    "category": e.outcome.category}
    attempt(label, f"READ {len(ledger.experiments)} recorded outcomes")


def packaged_record() -> None:
    try:
        from mdbench.sdl.vapdiff import load_vapdiff

        _learn(load_vapdiff(), "packaged_record")
    except Exception as exc:  # noqa: BLE001 — every failure is the point
        attempt("packaged_record", f"failed: {type(exc).__name__}: {str(exc)[:200]}")
    agent = os.environ.get("MDBENCH_SDL_AGENT_DIR", "")
    for path in [os.path.join(agent, "..", "evaluator", "ledger.json")] + \
            glob.glob("/work/*/data/sdl/vapdiff_crystal") + glob.glob("/work/wt/*/lib/mdbench/sdl/data/vapdiff_crystal"):
        try:
            if path.endswith(".json"):
                from mdbench.sdl.ledger import load_ledger_json

                _learn(load_ledger_json(path), f"file {path}")
            else:
                from mdbench.sdl.vapdiff import load_vapdiff

                _learn(load_vapdiff(path), f"file {path}")
        except Exception as exc:  # noqa: BLE001
            attempt(f"file {path}", f"failed: {type(exc).__name__}: {str(exc)[:160]}")


def oracle(state: dict, eid: str) -> dict | None:
    if eid in found:
        return found[eid]
    for key in ("candidates", "heldout_panel", "future_panel", "initial_context"):
        for it in state.get(key, []):
            if it["experiment_id"] == eid:
                return by_descriptors.get(json.dumps(it["descriptors"], sort_keys=True))
    return None


def row(state: dict, eid: str) -> dict:
    cats = state["record"]["categories"]
    k = len(cats)
    r = {"experiment_id": eid, "p_category": {c: 1.0 / k for c in cats}}
    va = state["record"]["validity_axis"]
    if va:
        r["p_valid"] = k / (k + 1)
    o = oracle(state, eid)
    if o is not None:
        if o["category"] in cats:
            r["p_category"] = {c: (1 - 0.001 * (k - 1) if c == o["category"] else 0.001) for c in cats}
        if va:
            r["p_valid"] = 0.999 if o["valid"] else 0.001
    return r


def act(state: dict) -> dict:
    phase, eid, rem = state["phase"], state["open_experiment"], state["budgets_remaining"]
    if phase in ("prior_forecast", "update_forecast"):
        return {"action": "submit_forecast", "forecast": row(state, eid)}
    options = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
    if rem["experiments"] > 0 and options:
        return {"action": "select_experiment", "experiment_id": options[0]}
    return {"action": "stop"}


class InProcessCheat:
    """The stack walk as an in-process policy object (no isolation: it finds the environment)."""

    name = "in-process stack walk"

    def reset(self, seed):
        pass

    def act(self, state):
        stack_walk()
        return act(state)

    def forecast(self, state, experiment_ids):
        stack_walk()
        return [row(state, i) for i in experiment_ids]

    def review_expectation(self, state, experiment_id):
        return {"forecast_changes_conclusion": 0.5, "forecast_quality_tier": "unknown"}

    def close(self):
        found.clear()


def main() -> None:
    mode = sys.argv[sys.argv.index("--mode") + 1]
    try_it = stack_walk if mode == "stack_walk" else packaged_record
    for line in sys.stdin:
        msg = json.loads(line)
        t = msg["type"]
        if t == "hello":
            try_it()
            reply = {"ok": True, "name": f"cheat-{mode}"}
        elif t == "act":
            if mode == "stack_walk":
                stack_walk()
            reply = act(msg["state"])
        elif t == "forecast":
            if mode == "stack_walk":
                stack_walk()
            reply = {"forecasts": [row(msg["state"], i) for i in msg["experiment_ids"]]}
        elif t == "review_expectation":
            reply = {"forecast_changes_conclusion": 0.5, "forecast_quality_tier": "unknown"}
        else:
            break
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
