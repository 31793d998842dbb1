"""The ``mdbench`` command line: one sub-command per room, each loaded only when it is used.

Every room keeps its commands in ``mdbench.<room>.commands`` so that rooms can grow independently
and ``mdbench --help`` stays fast (no MDAnalysis import just to print help).
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from mdbench.errors import MdbenchError

#: command name → ("module:attribute" of a click command or group, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "run-template": ("mdbench.execute.commands:run_template", "Execute one template for one system."),
    "batch": ("mdbench.execute.commands:batch", "Run a plan of (run, system, stage) jobs."),
    "record": ("mdbench.record.commands:record", "Inspect and validate a run record."),
    "bundle": ("mdbench.inputs.commands:bundle", "Build, verify and validate the agent input bundle."),
    "study": ("mdbench.engine.commands:study", "Run the electrolyte study: setup to production."),
    "analyze": ("mdbench.analysis.commands:analyze", "Analyse the cases of a run directory."),
    "analyze-files": ("mdbench.analysis.commands:analyze_files", "Analyse any GROMACS tpr/xtc/edr."),
    "audit": ("mdbench.audit.commands:audit", "SAEO audit of a run directory."),
    "report": ("mdbench.report.commands:report", "Render audits into one HTML report."),
    "arena": ("mdbench.arena.commands:arena", "Harbor-format task suite: validate, oracle, run, aggregate."),
    "sdl": ("mdbench.sdl.commands:sdl", "SDL-style campaign replay: compile, run, score."),
    "episode": ("mdbench.episode.commands:episode", "Agent episodes: prepare, run confined, audit, aggregate."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Static help lines: listing commands must not import every room.
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in sorted(COMMANDS)])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


@click.group(cls=LazyGroup)
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="mdbench")
def cli(verbose: int) -> None:
    """mdbench: run, audit and score molecular-dynamics studies."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def not_built(room: str, issue: str) -> click.Command:
    """A placeholder command for a room that is not implemented yet; it says so and exits 2."""

    @click.command(name=room, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def _cmd() -> None:
        click.echo(f"mdbench {room}: not built yet (tracked in {issue}).", err=True)
        sys.exit(2)

    _cmd.help = f"Not built yet ({issue})."
    return _cmd


def main() -> None:
    """Entry point: run the CLI, turning :class:`MdbenchError` into one clear line and exit 1."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except MdbenchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
