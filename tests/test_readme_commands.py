"""Every `mdbench …` example in the README's fenced blocks (issue 38).

Each example line (with its ``\\`` continuations; ``a | b`` sub-command alternatives split) must name real
sub-commands and only options those commands have. The examples that need no long computation also RUN, as
written, in a scratch working directory, with the README's placeholders (RUN_DIR, …) bound to the micro
fixtures; the rest say why they do not run here (each long one is run by its room's tests). A new example
that is neither runnable nor listed as long fails the test, so the README cannot drift from the CLI.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _cli_fixtures  # noqa: E402

from mdbench.cli import cli  # noqa: E402
from mdbench.paths import PROJECT_ROOT  # noqa: E402

#: command path → why it does not run in this test (every one of these is exercised by its room's tests)
LONG = {
    "bundle validate-ff": "GROMACS liquids of DMC/TTE (minutes)",
    "study run": "a study: GROMACS MD (tests/engine)",
    "analyze": "the analysis templates of a run (tests/analysis_*)",
    "analyze-files": "a full analysis; run in tests/test_cli_quiet.py",
    "audit": "the SAEO audit (tests/audit)",
    "report": "executes the report notebook (tests/report)",
    "arena oracle": "every arena task's oracle (tests/arena)",
    "arena run": "an agent over the arena tasks (tests/arena)",
    "arena aggregate": "needs arena job folders (tests/arena)",
    "arena inputs": "builds the arena inputs (tests/arena)",
    "arena pin-base": "rewrites every task's FROM once the base image is pushed (tests/arena, on a copy)",
    "sdl compile": "36 assignments (20 s; tests/sdl)",
    "sdl run": "campaign replays (minutes; tests/sdl)",
    "sdl score": "needs sdl run results (tests/sdl)",
    "sdl leaderboard": "needs sdl run results (tests/sdl)",
    "episode prepare": "an episode workspace (tests/episode)",
    "episode run": "a confined agent episode (tests/episode)",
    "episode aggregate": "needs episodes (tests/episode)",
    "run-template": "a stage notebook with GROMACS (tests/execute)",
    "batch": "a plan of stage notebooks (tests/execute)",
}
#: command paths that run here, as written (placeholders bound below)
RUNS = {"bundle build", "bundle verify", "record validate", "record budget", "arena list", "arena validate",
        "episode harbor-task"}


def readme_examples() -> list[str]:
    """`mdbench …` lines of the README's fenced blocks, continuations joined."""
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    examples: list[str] = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S):
        pending = ""
        for raw in block.splitlines():
            line = raw.rstrip()
            if pending:
                pending += " " + line.strip()
            elif line.strip().startswith("mdbench "):
                pending = line.strip()
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            examples.append(pending)
            pending = ""
    return examples


def _tokens(example: str) -> list[str]:
    return shlex.split(example.replace("…", "..."), comments=True)


def _command_path(tokens: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """(sub-command names, the click command, the remaining tokens)."""
    cmd: click.Command = cli
    path: list[str] = []
    rest = tokens[1:]
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), rest[0])
        if sub is None:
            break
        path.append(rest[0])
        cmd, rest = sub, rest[1:]
    return path, cmd, rest


def split_alternatives(example: str) -> list[list[str]]:
    """``mdbench arena list | validate X | inputs`` → three token lists; an argument's ``a | b`` stays."""
    parts = [p.strip() for p in example.split(" | ")]
    out = [_tokens(parts[0])]
    parent = ["mdbench", *_command_path(out[0])[0][:-1]]
    for part in parts[1:]:
        toks = _tokens(part)
        group = _command_path(parent + ["--help"])[1]
        if toks and isinstance(group, click.Group) and group.get_command(click.Context(group), toks[0]):
            out.append(parent + toks)
    return out


def _options(tokens: list[str]) -> list[str]:
    names = []
    for tok in tokens:
        tok = tok.strip("[]")
        if re.match(r"^--?[A-Za-z]", tok):
            names.append(tok.split("=", 1)[0].split("|", 1)[0])
    return names


EXAMPLES = [alt for example in readme_examples() for alt in split_alternatives(example)]


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 20
    first_screen = "\n".join((PROJECT_ROOT / "README.md").read_text().splitlines()[:12])
    assert "make demo" in first_screen and "make test" in first_screen
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in first_screen


@pytest.mark.parametrize("tokens", EXAMPLES, ids=[" ".join(t[:4]) for t in EXAMPLES])
def test_example_names_real_commands_and_options(tokens: list[str]) -> None:
    path, cmd, rest = _command_path(tokens)
    key = " ".join(path)
    assert path and not isinstance(cmd, click.Group), f"{' '.join(tokens)}: no such command"
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for name in _options(rest):
        assert name in known, f"README: `mdbench {key}` has no option {name}"
    assert key in RUNS or key in LONG, f"README example `mdbench {key}`: add it to RUNS (and run it) or LONG"


def _first_arena_task() -> Path:
    """A committed arena task (what `mdbench arena validate TASK_DIR` checks)."""
    from mdbench.arena.task import TASKS_DIR

    return sorted(p for p in TASKS_DIR.iterdir() if (p / "task.toml").is_file())[0]


def _bind(tokens: list[str], micro: dict[str, Path]) -> list[str]:
    """The README's placeholders → the micro fixtures; optional [..] parts and `a|b` choices → left out/first."""
    out, skip = [], 0
    for tok in tokens[1:]:
        if tok.startswith("["):
            skip += tok.count("[") - tok.count("]")
            continue
        if skip:
            skip += tok.count("[") - tok.count("]")
            continue
        tok = {"RUN_DIR": str(micro["run"]), "AUDIT_DIR": str(micro["audit"]), "BUNDLE": str(micro["bundle"]),
               "TASK_DIR": str(_first_arena_task())}.get(tok, tok)
        out.append(tok.split("|", 1)[0] if not tok.startswith("-") else tok)
    return out


@pytest.mark.gromacs
def test_quick_examples_run_as_written(tmp_path_factory, tmp_path: Path, capsys, monkeypatch) -> None:
    """The examples that need no long computation run in a scratch folder, in README order, exit 0."""
    from mdbench.cli import main

    micro = _cli_fixtures.micro_dirs(tmp_path_factory)
    monkeypatch.chdir(tmp_path)
    ran = []
    for tokens in EXAMPLES:
        key = " ".join(_command_path(tokens)[0])
        if key not in RUNS:
            continue
        argv = _bind(tokens, micro)
        monkeypatch.setattr(sys, "argv", ["mdbench", *argv])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code or 0
        out, err = capsys.readouterr()
        assert code == 0, f"README `mdbench {' '.join(argv)}` exited {code}: {err}"
        assert "Traceback" not in err
        ran.append(key)
    assert set(ran) == RUNS
