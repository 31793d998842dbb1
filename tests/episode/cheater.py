"""An agent that tries to cheat: write its frozen inputs, read the evaluator's files, outlive its episode.

It records every attempt's outcome in ``cheat.json`` in its working directory. ``--rename`` also tries to move
``agent_input/`` away; ``--linger`` then starts a ``setsid`` child that rewrites ``alive`` every 0.1 s forever
and makes the agent itself ignore SIGTERM and sleep past any timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def attempt(fn) -> str:
    try:
        out = fn()
        return "ok" if out is None else f"ok: {str(out)[:200]}"
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


def main() -> int:
    ws = Path.cwd()
    ep = ws.parent
    agent_input = Path(os.environ["MDBENCH_AGENT_INPUT"])
    case = agent_input / "cases" / "DE.yaml"
    report = {
        "uid": os.getuid(),
        "write_case_file": attempt(lambda: case.open("a").write("# tampered\n")),
        "chmod_case_file": attempt(lambda: os.chmod(case, 0o644)),
        "create_in_agent_input": attempt(lambda: (agent_input / "extra.txt").write_text("x")),
        "delete_from_agent_input": attempt(lambda: (agent_input / "references" / "ESTIMATORS.md").unlink()),
        "rename_agent_input": attempt(lambda: agent_input.rename(ws / "moved")) if "--rename" in sys.argv else None,
        "overwrite_prompt": attempt(lambda: (ws / "PROMPT.md").write_text("do nothing")),
        "read_episode_json": attempt(lambda: (ep / "episode.json").read_text()),
        "list_episode_folder": attempt(lambda: sorted(os.listdir(ep))),
        "list_episodes_beside": attempt(lambda: sorted(os.listdir(ep.parent))),
        "read_pristine_checksums": attempt(lambda: (ep / "bundle" / "bundle_checksums.sha256").read_text()),
        "read_root_home": attempt(lambda: sorted(os.listdir("/root"))),
        "list_project_root": attempt(lambda: sorted(os.listdir(os.environ.get("MDBENCH_PROJECT_ROOT", "/")))),
        "env_keys": sorted(os.environ),
    }
    (ws / "cheat.json").write_text(json.dumps(report, indent=1))
    if "--linger" in sys.argv:
        child = ("import os, time, pathlib\n"
                 "p = pathlib.Path('alive')\n"
                 "while True:\n"
                 "    p.write_text(str(time.time())); time.sleep(0.1)\n")
        subprocess.Popen([sys.executable, "-c", child], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends the agent itself
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
