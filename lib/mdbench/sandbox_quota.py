"""A hard byte quota on a confined process's working folder: a sparse ext4 image, loop-mounted only inside the
sandbox's own mount namespace.

:func:`make_image` (the caller, as root) creates ``image`` — sparse, ``quota_mib`` large, no journal, its root
owned by the sandbox user — filled with what the working folder holds now (``mkfs.ext4 -d``). The supervisor
attaches it to a free loop device with ``LO_FLAGS_AUTOCLEAR`` (:func:`attach_loop`, one ``LOOP_CONFIGURE``
ioctl: no window where a device is attached without autoclear) and mounts it over the working folder in its
private mount namespace. The command's writes past the quota (bytes or inodes) fail with ``ENOSPC``; the host's
disk never holds more than the image. Nothing is mounted in the host's namespace: when the tree ends — however
the caller ends, SIGKILL included — the namespace dies, the kernel unmounts the file system and autoclear
detaches the loop device.

Afterwards :func:`copy_out` mounts the image read-only in a throw-away child's private mount namespace (the child
dies with its caller) and copies it into the working folder on the host: regular files (holes kept: a sparse
1 TB file stays sparse), folders, symbolic links as links (never followed), FIFOs as FIFOs, hard links as
links (a file linked 10,000 times is copied once); sockets and devices are skipped and counted. The caller
then removes the image. Linux and root only; :func:`available` says why not elsewhere.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["available", "make_image", "attach_loop", "copy_out", "default_image"]

_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE = 0x4C82, 0x4C0A
_LO_FLAGS_AUTOCLEAR = 4
_LOOP_CONFIG_SIZE = 304  # struct loop_config: fd, block_size, struct loop_info64 (232 bytes), 8 reserved u64
_LO_FLAGS_OFFSET = 8 + 52  # loop_config.info.lo_flags
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 16384, 1 << 18
_CLONE_NEWNS = 0x00020000
#: Headroom below which the quota counts as reached (ext4 keeps a few blocks of its own).
_FULL_BYTES = 1 << 20
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)  # not find_library: it forks (see mdbench.sandbox._libc)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _enter_own_mount_namespace() -> None:
    """``preexec_fn`` of the copy-out child: SIGKILL when the caller dies, a private mount namespace."""
    libc = _libc()
    libc.prctl(1, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def default_image(workdir: Path) -> Path:
    """``.<workdir name>.quota.img`` beside ``workdir``."""
    return workdir.parent / f".{workdir.name}.quota.img"


def available() -> tuple[bool, str | None]:
    """(True, None) where a loop-mounted quota can be made here, else (False, why)."""
    if not sys.platform.startswith("linux"):
        return False, "not Linux"
    if os.geteuid() != 0:
        return False, "loop devices need root"
    if not os.path.exists("/dev/loop-control"):
        return False, "no /dev/loop-control"
    if not shutil.which("mkfs.ext4"):
        return False, "mkfs.ext4 not found"
    return True, None


def make_image(image: Path, quota_mib: int, source: Path, uid_gid: tuple[int, int] | None) -> list[str]:
    """Create the sparse ext4 ``image`` of ``quota_mib`` holding ``source``'s contents; OSError on failure.

    Returns the names at the top of ``source`` copied in (:func:`copy_out` replaces them with the image's)."""
    names = sorted(os.listdir(source))
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, int(quota_mib) * 2**20)
    finally:
        os.close(fd)
    owner = f"{uid_gid[0]}:{uid_gid[1]}" if uid_gid else f"{os.geteuid()}:{os.getegid()}"
    proc = subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-d", str(source),
                           "-E", f"root_owner={owner},lazy_itable_init=1", str(image)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(image)
        raise OSError(f"mkfs.ext4 of the workspace quota image failed: {proc.stderr.strip()[-300:]}")
    return names


def attach_loop(image_fd: int) -> tuple[int, str]:
    """Attach ``image_fd`` to a free loop device with autoclear; (its open fd, its path). No fork."""
    config = bytearray(_LOOP_CONFIG_SIZE)
    struct.pack_into("I", config, 0, image_fd)
    struct.pack_into("I", config, _LO_FLAGS_OFFSET, _LO_FLAGS_AUTOCLEAR)
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(64):  # another episode may take the free device first
            n = fcntl.ioctl(ctl, _LOOP_CTL_GET_FREE)
            dev = f"/dev/loop{n}"
            loop_fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop_fd, _LOOP_CONFIGURE, bytes(config))
                return loop_fd, dev
            except OSError:
                os.close(loop_fd)
        raise OSError("no free loop device for the workspace quota")
    finally:
        os.close(ctl)


def mount_image(image_fd: int, target: str, *, readonly: bool = False) -> None:
    """Mount the ext4 image over ``target`` (this process's mount namespace); the loop device is released
    when the file system is unmounted (namespace gone)."""
    loop_fd, dev = attach_loop(image_fd)
    try:
        flags = _MS_NOSUID | _MS_NODEV | ((_MS_RDONLY | _MS_NOEXEC) if readonly else 0)
        _mount(dev, target, "ext4", flags, None if readonly else "noinit_itable")
    finally:
        os.close(loop_fd)


def attached(image: Path) -> list[str]:
    """Loop devices whose backing file is ``image`` (``/sys/block/loop*/loop/backing_file``)."""
    target = str(Path(image).absolute())
    out = []
    for f in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            backing = f.read_text().strip()
        except OSError:
            continue
        if backing in (target, f"{target} (deleted)"):
            out.append(f"/dev/{f.parent.parent.name}")
    return out


def wait_released(image: Path, timeout_s: float = 30.0) -> bool:
    """Wait until no loop device holds ``image`` (the sandbox's namespace is torn down asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while attached(image):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def copy_out(image: Path, dest: Path, skip_top: tuple[str, ...] = (), replace_top: tuple[str, ...] = (),
             timeout_s: float = 3600.0) -> dict[str, Any]:
    """Copy the image's tree into ``dest`` (a child in its own mount namespace); returns usage and counts.

    ``replace_top``: names at the top of ``dest`` that went into the image (:func:`make_image`); they are
    removed from ``dest`` first, so that what the command changed or deleted shows. ``skip_top`` (read-only
    binds, the host's copy is the pristine one) are neither removed nor copied. Never raises for what the tree
    holds: ``{"error": …}`` when the copy failed.
    """
    if not wait_released(image):
        return {"error": f"the quota image {image} is still attached to {', '.join(attached(image))}; not copied"}

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "LANG": "C.UTF-8"}
    try:
        proc = subprocess.run([sys.executable, "-s", "-m", "mdbench.sandbox_quota", str(image), str(dest),
                               json.dumps(list(skip_top)), json.dumps(list(replace_top))],
                              capture_output=True, text=True, env=env, preexec_fn=_enter_own_mount_namespace,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"copying the workspace out of its quota image took over {timeout_s:g} s"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"copying the workspace out failed: {proc.stderr.strip()[-300:] or proc.returncode}"}


def _copy_main(image: str, dest: str, skip_top: list[str], replace_top: list[str]) -> dict[str, Any]:
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one descriptor per folder waiting to be copied
    dst_fd = os.open(dest, _NOFOLLOW_DIR)  # the host's folder, before the image covers it
    image_fd = os.open(image, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    for name in sorted(set(replace_top) - set(skip_top)):  # the image holds their state after the run
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=dst_fd, follow_symlinks=False).st_mode):
                shutil.rmtree(name, dir_fd=dst_fd)
            else:
                os.unlink(name, dir_fd=dst_fd)
        except FileNotFoundError:
            pass
    mount_image(image_fd, dest, readonly=True)
    os.close(image_fd)
    src_fd = os.open(dest, _NOFOLLOW_DIR)
    st = os.statvfs(src_fd)
    usage = {"quota_bytes": st.f_blocks * st.f_frsize, "used_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize,
             "free_bytes": st.f_bavail * st.f_frsize, "inodes": st.f_files, "inodes_free": st.f_favail}
    usage["quota_reached"] = bool(usage["free_bytes"] < _FULL_BYTES or st.f_favail == 0)
    counts = _copy_tree(src_fd, dst_fd, set(skip_top) | {"lost+found"}, logical_cap=usage["quota_bytes"])
    usage["quota_reached"] = usage["quota_reached"] or bool(counts["over_quota"])
    return {**usage, **counts}


def _copy_tree(src_root: int, dst_root: int, skip_top: set[str], logical_cap: int | None = None) -> dict[str, Any]:
    """Copy ``src_root`` into ``dst_root`` by descriptors (no path is resolved twice, no link followed).

    The quota counts *logical* sizes (a sparse file is as big as it says): once the files copied add up to
    ``logical_cap`` bytes, a further regular file is not copied (``over_quota`` counts them, ``over_quota_names``
    names the first few, escaped) — what the evaluator reads afterwards is bounded by the quota whatever holes
    the agent made."""
    counts: dict[str, Any] = {"files": 0, "dirs": 0, "symlinks": 0, "fifos": 0, "hardlinks": 0, "skipped": 0,
                              "bytes": 0, "logical_bytes": 0, "over_quota": 0, "over_quota_names": []}
    links: dict[tuple[int, int], tuple[int, str]] = {}
    stack: list[tuple[int, int, bool]] = [(src_root, dst_root, True)]
    referenced: set[int] = set()  # destination folders a hard link may point into: kept open
    while stack:
        src, dst, top = stack.pop()
        for name in sorted(os.listdir(src)):
            if top and name in skip_top:
                continue
            st = os.stat(name, dir_fd=src, follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode) & 0o777
            try:
                if stat.S_ISDIR(st.st_mode):
                    os.mkdir(name, 0o700, dir_fd=dst)
                    s2 = os.open(name, _NOFOLLOW_DIR, dir_fd=src)
                    d2 = os.open(name, _NOFOLLOW_DIR, dir_fd=dst)
                    os.chown(d2, st.st_uid, st.st_gid)
                    os.chmod(d2, mode)
                    stack.append((s2, d2, False))
                    counts["dirs"] += 1
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if st.st_nlink > 1 and key in links:
                        first_dir, first_name = links[key]
                        os.link(first_name, name, src_dir_fd=first_dir, dst_dir_fd=dst)
                        counts["hardlinks"] += 1
                        continue
                    if logical_cap is not None and counts["logical_bytes"] + st.st_size > logical_cap:
                        counts["over_quota"] += 1
                        if len(counts["over_quota_names"]) < 10:
                            counts["over_quota_names"].append(ascii(name)[1:-1][:200])
                        continue
                    counts["logical_bytes"] += st.st_size
                    counts["bytes"] += _copy_file(src, dst, name, st, mode)
                    counts["files"] += 1
                    if st.st_nlink > 1:
                        links[key] = (dst, name)
                        referenced.add(dst)
                elif stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
                    os.chown(name, st.st_uid, st.st_gid, dir_fd=dst, follow_symlinks=False)
                    counts["symlinks"] += 1
                elif stat.S_ISFIFO(st.st_mode):
                    os.mkfifo(name, mode, dir_fd=dst)
                    os.chown(name, st.st_uid, st.st_gid, dir_fd=dst, follow_symlinks=False)
                    counts["fifos"] += 1
                else:
                    counts["skipped"] += 1
            except FileExistsError:
                counts["skipped"] += 1
        if src != src_root:
            os.close(src)
        if dst != dst_root and dst not in referenced:
            os.close(dst)
    for fd in referenced - {dst_root}:
        os.close(fd)
    return counts


def _copy_file(src: int, dst: int, name: str, st: os.stat_result, mode: int) -> int:
    """Copy one regular file, holes kept (SEEK_DATA/SEEK_HOLE); bytes of data copied."""
    fi = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
    fo = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst)
    copied = 0
    try:
        pos = 0
        while pos < st.st_size:
            try:
                data_at = os.lseek(fi, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            hole_at = os.lseek(fi, data_at, os.SEEK_HOLE)
            os.lseek(fi, data_at, os.SEEK_SET)
            os.lseek(fo, data_at, os.SEEK_SET)
            left = hole_at - data_at
            while left > 0:
                chunk = os.read(fi, min(left, 1 << 20))
                if not chunk:
                    break
                os.write(fo, chunk)
                left -= len(chunk)
                copied += len(chunk)
            pos = hole_at
        os.ftruncate(fo, st.st_size)
        os.fchown(fo, st.st_uid, st.st_gid)
        os.fchmod(fo, mode)
    finally:
        os.close(fi)
        os.close(fo)
    return copied


if __name__ == "__main__":  # the copy-out child, in its own mount namespace (see copy_out)
    try:
        print(json.dumps(_copy_main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]))))
    except OSError as exc:
        print(json.dumps({"error": f"copy out of the quota image: {exc}"}))
