"""The ``mdbench`` command line: one sub-command per room, each loaded only when it is used.

Every room keeps its commands in ``mdbench.<room>.commands`` so that rooms can grow independently
and ``mdbench --help`` stays fast (no MDAnalysis import just to print help).
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
from pathlib import Path

import click

from mdbench.errors import MdbenchError

#: command name → ("module:attribute" of a click command or group, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "run-template": ("mdbench.execute.commands:run_template", "Execute one template for one system."),
    "batch": ("mdbench.execute.commands:batch", "Run a plan of (run, system, stage) jobs."),
    "record": ("mdbench.record.commands:record", "Inspect and validate a run record."),
    "bundle": ("mdbench.validation.commands:bundle", "Build, verify and validate the agent input bundle."),
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
    quiet_by_default(verbose)


def quiet_by_default(verbose: int = 0) -> None:
    """Silence third-party chatter that says nothing about the user's data (shown again with ``-v``):
    MDAnalysis' import-time notice about optional netCDF4 (AMBER files, never used here)."""
    if verbose:
        return
    import warnings

    logging.getLogger("MDAnalysis").setLevel(logging.ERROR)  # its import logs the netCDF4 notice as WARNING
    warnings.filterwarnings("ignore", message=r".*netCDF4 is not available.*")
    warnings.filterwarnings("ignore", message=r".*[Nn]etCDF.*", module=r"MDAnalysis.*")


#: what to do about the OSErrors a user causes, by errno
_OS_FIX = {
    errno.ENOTDIR: "a folder in this path is a file; choose another path",
    errno.EEXIST: "something is in the way; remove it or choose another path",
    errno.EROFS: "read-only file system; choose a writable path",
    errno.EACCES: "permission denied; choose a path you may write",
    errno.EPERM: "operation not permitted; choose a path you may write",
    errno.ENOENT: "no such file or folder; check the path",
    errno.ENOSPC: "the disk is full; free space or choose another path",
    errno.EISDIR: "a folder is in the way; give a file path",
}


def os_error_line(exc: OSError) -> str:
    """One line for an :class:`OSError`: the path(s) it names, what happened and the fix."""
    paths = " → ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    what = exc.strerror or str(exc)
    fix = _OS_FIX.get(exc.errno or -1)
    return (f"{paths}: " if paths else "") + what + (f" ({fix})" if fix else "")


def check_out(path: str | Path, *, option: str = "--out", is_file: bool = False) -> Path:
    """Refuse, before any work, an output path that cannot be written: one line naming it and the fix.

    Parameters
    ----------
    path
        The output folder (or file when ``is_file``); it need not exist yet.
    option
        The option's name, for the message.
    is_file
        The path is a file to write (its parent folder must be writable); otherwise a folder.
    """
    from mdbench.errors import InputError

    target = Path(path).absolute()
    if target.exists() and (target.is_dir() if is_file else not target.is_dir()):
        raise InputError(f"{option}: a {'folder' if is_file else 'file'} is in the way; choose another path",
                         str(target))
    ancestor = target if target.exists() else target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{option}: {ancestor} is a file, not a folder; choose another path", str(target))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only(ancestor) else "not writable"
        raise InputError(f"{option}: {ancestor} is {why}; choose a writable path", str(target))
    return Path(path)


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def main() -> None:
    """Entry point: run the CLI, turning :class:`MdbenchError` — and any ``OSError`` or ``ValueError`` a
    command did not turn into one — into one clear line and exit 1 (``-v`` adds the traceback)."""
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
    except OSError as exc:
        logging.getLogger("mdbench").debug("OSError", exc_info=True)
        click.echo(f"error: {os_error_line(exc)}", err=True)
        sys.exit(1)
    except ValueError as exc:
        logging.getLogger("mdbench").debug("ValueError", exc_info=True)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        click.echo(f"error: {first} (rerun with -vv for the details)", err=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
