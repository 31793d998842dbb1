"""What a sandbox may leave mounted: loop devices and mounts under a folder (read from /sys and /proc, no parsing
of ``losetup``'s output). Shared by the sandbox tests and the episode red team."""
from __future__ import annotations

from pathlib import Path


def loop_devices_under(folder: Path) -> list[str]:
    """Loop devices whose backing file lies under ``folder`` (what ``losetup -a`` lists)."""
    out = []
    for f in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if f.read_text().strip().startswith(str(folder)):
                out.append(f.parent.parent.name)
        except OSError:
            pass
    return out


def mounts_under(folder: Path) -> list[str]:
    """Lines of ``/proc/mounts`` that name ``folder``."""
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(folder) in line]
