"""Cheating SDL coordinators (issue 32), written as an attacker would, speaking the JSON-lines protocol.

Usage: python cheat_coordinator.py --mode MODE [--tag TAG] [--tree PATH] [--read PATH ...] [--honest]

Every mode plays the same honest game underneath (uniform forecasts, updated from a revealed category; selects
the last unselected candidate; inspects one evidence item per experiment) — ``--honest`` plays only that, the
*honest twin* each cheat is measured against. Modes:

``agent_tree``      reads every assignment file it can reach — ``$MDBENCH_SDL_AGENT_DIR``, the folders around it,
                    ``--tree PATH`` (the compile's public agent tree) — and learns descriptors → recorded outcome
                    from every initial context; forecasts one-hot wherever the descriptors match (ids are salted
                    per assignment, descriptors are not).
``shm_memory``      remembers across sessions: writes every outcome it is shown to ``/dev/shm``, ``/run/lock``,
                    ``/var/tmp``, ``/tmp`` and ``$HOME`` (``<TAG>.json``) and a POSIX shared-memory segment, reads
                    them back in every new session, forecasts one-hot on what it remembers.
``control_detector`` honest in what it believes is the adaptive branch; in what it believes is a control —
                    no-evidence (a zero evidence budget, a ``calls_target``, a withheld first evidence item) or
                    random (an experiment selected that it would not have chosen) — it forecasts confidently
                    wrong, to inflate the selection and evidence lifts (``--only-random``: in the random
                    control only).
``deep_reply``      answers every act and forecast with JSON nested 100,000 levels deep.
``int400``          a forecast / action with a 400-digit integer probability.
``int5000``         a forecast / action with a 5,000-digit integer probability.
``nan_review``      ``request_review`` / forecasts with ``NaN`` probabilities.
``not_json``        answers with prose.
``bad_utf8``        answers ``act`` with bytes that are not UTF-8.
``stderr_flood``    writes 300 MB to stderr on its first ``act``, then plays honestly.
``argv_file``       reads the files named after ``--read`` on its own command line (issue 49: a file of its
                    "own folder" that is a symlink to the evaluator's ``ledger.json``, or the evaluator's files
                    named directly) and learns descriptors → recorded outcome from every ledger or assignment it
                    can parse; forecasts one-hot where they match.
``no_read``         answers ``hello``, then never reads its stdin again (sleeps).
``close_stdout``    answers ``hello``, then closes its stdout and sleeps.
``flood_stdout``    answers ``hello``, then writes reply lines to stdout without end, never reading.
``flood_line``      answers ``hello``, then writes one line without end (no newline), never reading.

Every attempt is reported on stderr as ``ATTEMPT <name>: <result>``.
"""

from __future__ import annotations

import glob
import json
import os
import sys

ARGS = sys.argv[1:]
MODE = ARGS[ARGS.index("--mode") + 1] if "--mode" in ARGS else "honest"
TAG = ARGS[ARGS.index("--tag") + 1] if "--tag" in ARGS else "mdbench-sdl-redteam"
TREE = ARGS[ARGS.index("--tree") + 1] if "--tree" in ARGS else None
READ = [ARGS[i + 1] for i, a in enumerate(ARGS) if a == "--read" and i + 1 < len(ARGS)]
HONEST = "--honest" in ARGS or MODE == "honest"
ONLY_RANDOM = "--only-random" in ARGS      # control_detector: sabotage the random control only
KNOWN: dict[str, dict] = {}        # canonical descriptors → {"valid", "category"}
flooded = False


def attempt(name: str, result: str) -> None:
    sys.stderr.write(f"ATTEMPT {name}: {result}\n")
    sys.stderr.flush()


def key(descriptors: dict) -> str:
    return json.dumps(descriptors, sort_keys=True)


def learn_view(view: dict) -> int:
    n = 0
    for c in view.get("initial_context", []):
        KNOWN[key(c["descriptors"])] = c["outcome"]
        n += 1
    return n


# ------------------------------------------------------------------------------------------------ the cheats
def read_agent_tree() -> None:
    roots = [os.environ.get("MDBENCH_SDL_AGENT_DIR", "")]
    if roots[0]:
        roots += [os.path.join(roots[0], ".."), os.path.join(roots[0], "..", "agent")]
    if TREE:
        roots.append(TREE)
    files = sorted({os.path.realpath(p) for r in roots if r for p in glob.glob(os.path.join(r, "*.json"))})
    n_files = 0
    for p in files:
        try:
            with open(p, encoding="utf-8") as fh:
                view = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(view, dict) and "initial_context" in view:
            n_files += 1
            learn_view(view)
    attempt("agent_tree", f"{n_files} assignment files readable, {len(KNOWN)} outcomes learnt")


def read_argv_files() -> None:
    """Learn outcomes from every file named after --read (a ledger: descriptors → outcome)."""
    for path in READ:
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            attempt("argv_file", f"{path}: unreadable ({type(exc).__name__})")
            continue
        n = 0
        for e in doc.get("experiments", []) if isinstance(doc, dict) else []:
            if isinstance(e, dict) and "descriptors" in e and "outcome" in e:
                KNOWN[key(e["descriptors"])] = e["outcome"]
                n += 1
        attempt("argv_file", f"{path}: read, {n} outcomes learnt")


MEMO_DIRS = ["/dev/shm", "/run/lock", "/var/tmp", "/tmp", os.environ.get("HOME", "/nonexistent")]


def recall() -> None:
    found = []
    for d in MEMO_DIRS:
        try:
            with open(os.path.join(d, f"{TAG}.json"), encoding="utf-8") as fh:
                KNOWN.update(json.load(fh))
            found.append(d)
        except (OSError, ValueError):
            pass
    try:
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(name=TAG)
        raw = bytes(shm.buf).split(b"\0", 1)[0]
        KNOWN.update(json.loads(raw or b"{}"))
        found.append("posix_shm")
        shm.close()
    except Exception:  # noqa: BLE001
        pass
    attempt("recall", f"memory found in {found}; {len(KNOWN)} outcomes remembered")


def remember(state: dict) -> None:
    learn_view(state)
    text = json.dumps(KNOWN)
    for d in MEMO_DIRS:
        try:
            with open(os.path.join(d, f"{TAG}.json"), "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass
    try:
        from multiprocessing import resource_tracker, shared_memory

        data = text.encode() + b"\0"
        try:
            shm = shared_memory.SharedMemory(name=TAG, create=True, size=max(len(data), 1 << 20))
        except FileExistsError:
            shm = shared_memory.SharedMemory(name=TAG)
        if len(data) <= shm.size:
            shm.buf[:len(data)] = data
        resource_tracker.unregister(shm._name, "shared_memory")   # keep it after exit
        shm.close()
    except Exception:  # noqa: BLE001
        pass


# ------------------------------------------------------------------------------------------------ honest game
def uniform(state: dict, eid: str) -> dict:
    cats = state["record"]["categories"]
    k = len(cats)
    row = {"experiment_id": eid, "p_category": {c: 1.0 / k for c in cats}}
    if state["record"]["validity_axis"]:
        row["p_valid"] = k / (k + 1)
    for e in state["experiments"]:
        if e["experiment_id"] == eid:
            for r in e["reveals"]:
                cat = (r.get("payload") or {}).get("category")
                if r.get("status") == "revealed" and cat in cats:
                    row["p_category"] = {c: (0.97 if c == cat else 0.01) for c in cats}
    return row


def descriptors_of(state: dict, eid: str) -> dict | None:
    for k in ("candidates", "heldout_panel", "future_panel", "initial_context"):
        for it in state.get(k, []):
            if it["experiment_id"] == eid:
                return it["descriptors"]
    return None


def row(state: dict, eid: str) -> dict:
    r = uniform(state, eid)
    if HONEST:
        return r
    d = descriptors_of(state, eid)
    o = KNOWN.get(key(d)) if d is not None else None
    if o is not None:
        cats = state["record"]["categories"]
        if o.get("category") in cats:
            r["p_category"] = {c: (0.997 if c == o["category"] else 0.001) for c in cats}
        if state["record"]["validity_axis"]:
            r["p_valid"] = 0.999 if o.get("valid") else 0.001
    if MODE == "control_detector" and control_suspected(state):
        cats = state["record"]["categories"]
        wrong = cats[hash(eid) % len(cats)]          # confidently wrong-ish: sabotage the control
        r["p_category"] = {c: (0.997 if c == wrong else 0.001) for c in cats}
    return r


def own_choice(state: dict, selected_before: list[str]) -> str | None:
    options = [c["experiment_id"] for c in state["candidates"] if c["experiment_id"] not in selected_before]
    return options[-1] if options else None


def control_suspected(state: dict) -> bool:
    if ONLY_RANDOM:
        pass
    elif state.get("budgets", {}).get("evidence") == 0 or state.get("calls_target") is not None:
        attempt("control_detector", "no-evidence control announced by its state")
        return True
    for e in state.get("experiments", []) if not ONLY_RANDOM else []:
        ev = [r for r in e["reveals"] if r["kind"] == "evidence"]
        if ev and ev[0].get("status") == "missing":
            attempt("control_detector", "no-evidence control guessed from a withheld first item")
            return True
    order = [e["experiment_id"] for e in sorted(state.get("experiments", []), key=lambda e: e["order"])]
    for k, eid in enumerate(order):
        if eid != own_choice(state, order[:k]):
            attempt("control_detector", "random control: a selection that is not mine")
            return True
    return False


def act(state: dict) -> dict:
    phase, eid, rem = state["phase"], state["open_experiment"], state["budgets_remaining"]
    if phase in ("prior_forecast", "update_forecast"):
        return {"action": "submit_forecast", "forecast": row(state, eid)}
    if phase == "investigate":
        tr = next(e for e in state["experiments"] if e["experiment_id"] == eid)
        if rem["evidence"] > 0 and not tr["reveals"]:
            return {"action": "inspect_evidence", "experiment_id": eid, "tier": state["record"]["evidence_tiers"][0]}
    options = [c["experiment_id"] for c in state["candidates"] if not c["selected"]]
    if rem["experiments"] > 0 and options:
        return {"action": "select_experiment", "experiment_id": options[-1]}
    return {"action": "stop"}


# ------------------------------------------------------------------------------------------------ bad replies
def bad_reply(kind: str, state: dict, ids: list[str]) -> str | None:
    """The raw reply line of a crash mode (None: answer normally)."""
    if MODE == "deep_reply":
        return "[" * 100_000 + "]" * 100_000
    if MODE == "not_json":
        return "I think the second candidate looks promising."
    cats = state["record"]["categories"]
    big = {"int400": "1" + "0" * 399, "int5000": "7" * 5000, "nan_review": "NaN"}.get(MODE)
    if big is None:
        return None
    if kind == "forecast":
        rows = ", ".join('{"experiment_id": %s, "p_category": {%s}}' % (
            json.dumps(i), ", ".join(f'"{c}": {big if n == 0 else "0"}' for n, c in enumerate(cats))) for i in ids)
        return '{"forecasts": [%s]}' % rows
    if MODE == "nan_review" and state["phase"] == "investigate":
        return ('{"action": "request_review", "experiment_id": %s, "forecast_changes_conclusion": NaN, '
                '"forecast_quality_tier": "high"}' % json.dumps(state["open_experiment"]))
    eid = state["open_experiment"] or ""
    return ('{"action": "submit_forecast", "forecast": {"experiment_id": %s, "p_category": {%s}}}'
            % (json.dumps(eid), ", ".join(f'"{c}": {big}' for c in cats)))


def stall() -> None:
    """The stalling modes, after the hello reply: never read stdin again."""
    import time

    if MODE == "close_stdout":
        sys.stdout.flush()
        os.close(1)
    elif MODE == "flood_stdout":
        reply = json.dumps({"action": "stop"}) + "\n"
        while True:
            sys.stdout.write(reply * 1000)
    elif MODE == "flood_line":
        while True:
            sys.stdout.write("[" * 65536)
    while True:
        time.sleep(60)


def main() -> None:
    global flooded
    for line in sys.stdin:
        msg = json.loads(line)
        t = msg["type"]
        state = msg.get("state") or {}
        if t == "hello":
            if MODE == "agent_tree" and not HONEST:
                read_agent_tree()
            if MODE == "shm_memory" and not HONEST:
                recall()
            if MODE == "argv_file" and not HONEST:
                read_argv_files()
            out = json.dumps({"ok": True, "name": f"cheat-{MODE}{'-honest' if HONEST else ''}"})
        elif t == "bye":
            break
        else:
            if MODE == "shm_memory" and not HONEST:
                remember(state)
            if MODE == "stderr_flood" and t == "act" and not flooded:
                flooded = True
                chunk = ("x" * 1023 + "\n") * 1024
                for _ in range(300):
                    sys.stderr.write(chunk)
                sys.stderr.write("FLOOD DONE\n")
                sys.stderr.flush()
            ids = msg.get("experiment_ids") or []
            if MODE == "bad_utf8" and t == "act":
                sys.stdout.flush()
                sys.stdout.buffer.write(b'{"action": "stop\xff\xfe"}\n')
                sys.stdout.buffer.flush()
                continue
            out = None if HONEST else bad_reply(t, state, ids)
            if out is None:
                if t == "act":
                    out = json.dumps(act(state))
                elif t == "forecast":
                    out = json.dumps({"forecasts": [row(state, i) for i in ids]})
                else:
                    out = json.dumps({"forecast_changes_conclusion": 0.5, "forecast_quality_tier": "unknown"})
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
        if t == "hello" and MODE in ("no_read", "close_stdout", "flood_stdout", "flood_line"):
            stall()


if __name__ == "__main__":
    main()
