"""A run's ``.tpr`` and checkpoint read with ``gmx dump`` (a reader: nothing from the run is executed; output
bounded, a timeout, only regular files): run parameters, LJ parameters and charges, the checkpoint's time; cached
per run and prefetched in threads while the reanalysis runs.

One ``gmx dump -s`` per run input serves every check that reads it (:class:`TprDump`): the force-field checks
(:mod:`mdbench.audit.production_checks`, :mod:`mdbench.audit.frozen_ff`), the thermostat target, and the
protocol and frame-time checks (:mod:`mdbench.audit.production_protocol`,
:mod:`mdbench.audit.trajectory_integrity`) through its parsed ``inputrec`` header."""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
import tempfile
from typing import Any, NamedTuple

from mdbench.audit.runread import RunData
from mdbench.audit.simulation import _pick

log = logging.getLogger(__name__)
#: Largest |thermostat target - case target| accepted [K].
REF_T_TOL_K = 0.5


_DUMP_LINE = re.compile(r"^\s*(ref-t|ref_t|tcoupl|pcoupl|nsteps|dt|tinit)\s*[:=]\s*(.+?)\s*$", re.M)


#: Largest ``gmx dump`` output read [bytes]; a longer dump leaves the force-field fingerprint unset.
MAX_DUMP_BYTES = 64 << 20
_LJ = re.compile(r"^\s*functype\[\d+\]=LJ_SR,\s*(.*)$", re.M)
_ATOM = re.compile(r"^\s*atom\[\s*\d+\]=\{type=\s*(\d+).*?q=\s*([-+0-9.eE]+)", re.M)


def _regular(path: Any) -> bool:
    """True for a regular file (never a FIFO or device a run planted; links are resolved inside the run)."""
    import os  # noqa: PLC0415
    import stat  # noqa: PLC0415

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _bounded_output(argv: list[str], max_bytes: int, timeout_s: float) -> tuple[bytes, int | None]:
    """stdout of ``argv`` (stdin closed, stderr dropped, in a fresh temporary directory), read up to
    ``max_bytes`` + 1 bytes; the process is killed when it writes more or runs past ``timeout_s``.
    Returns (output, return code or None when killed)."""
    import os  # noqa: PLC0415
    import selectors  # noqa: PLC0415
    import time  # noqa: PLC0415

    chunks: list[bytes] = []
    n = 0
    with tempfile.TemporaryDirectory(prefix="mdbench-dump-") as tmp:
        proc = subprocess.Popen(argv, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        killed = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or n > max_bytes:
                    proc.kill()
                    killed = True
                    break
                if not sel.select(min(left, 1.0)):
                    continue
                data = os.read(proc.stdout.fileno(), 1 << 20)
                if not data:
                    break
                chunks.append(data)
                n += len(data)
        finally:
            sel.close()
            proc.stdout.close()
            rc = proc.wait()
    return b"".join(chunks), None if killed else rc


class TprDump(NamedTuple):
    """What one ``gmx dump -s`` of a run input says (:func:`_dump_now`)."""

    #: run parameters of the header (``ref-t``, ``tcoupl``, ``pcoupl``, ``nsteps``, ``dt``, ``tinit``), as printed
    params: dict[str, str]
    #: (the LJ parameter matrix, the atom types and charges of the molecule types), as printed; None unparsed
    fingerprint: tuple | None
    #: the force field by atom-type name (:func:`parse_dump_topology`); None unparsed
    force_field: dict | None
    #: every parameter of the ``inputrec`` header (:func:`parse_inputrec`); empty when not dumped
    inputrec: dict[str, Any]


_LINE = re.compile(r"^\s{3}([A-Za-z][\w-]*)\s*(?:=|:)\s*(.*?)\s*$")
_MATRIX_ROW0 = re.compile(r"^\s*(compressibility|ref-p)\[\s*0\]=\{\s*([-+0-9.eE]+)", re.M)


def parse_inputrec(text: str) -> dict[str, Any]:
    """Parameters of a ``gmx dump -s`` inputrec header: name (lower case) → text, or a list of floats for
    the per-coupling-group ``ref-t``/``tau-t`` and the first diagonal element of ``ref-p``/``compressibility``."""
    head = text.split("\nheader:", 1)[0].split("\ntopology:", 1)[0]
    out: dict[str, Any] = {}
    for line in head.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        key, val = m.group(1).lower(), m.group(2)
        if key in ("ref-t", "tau-t"):
            try:
                out[key] = [float(x) for x in val.split()]
            except ValueError:
                continue
        elif val and not val.endswith(":"):
            out.setdefault(key, val)
    for name, v in _MATRIX_ROW0.findall(head):
        out[name.lower()] = [float(v)]
    return out


def tpr_dump(run: RunData, rel: str) -> TprDump:
    """The ``gmx dump -s`` of a run input: run once per audit and file (:func:`_dump_now`), or taken from its
    :func:`prefetch`."""
    return _dump(run, rel)


def _dump(run: RunData, rel: str) -> TprDump:
    """:func:`_dump_now`, or the result of its :func:`prefetch`."""
    cache = run.fs.__dict__.setdefault("_tpr_dump", {})
    fut = run.fs.__dict__.get("_tpr_dump_futures", {}).pop(rel, None)
    if rel not in cache and fut is not None:
        try:
            cache[rel] = fut.result(timeout=120)
        except Exception:  # noqa: BLE001 - the prefetch failed: dump here
            pass
    if rel not in cache:
        cache[rel] = _dump_now(run, rel)
    return cache[rel]


def _dump_now(run: RunData, rel: str) -> TprDump:
    """The :class:`TprDump` of a ``.tpr`` by ``gmx dump -s`` (a reader, 60 s, its output capped at
    :data:`MAX_DUMP_BYTES`); empty parameters and no fingerprint when GROMACS is unavailable or the file does
    not parse. The fingerprint is (the LJ parameter matrix, the atom types and charges of the molecule types),
    as printed; the force field by atom-type name is :func:`parse_dump_topology`'s. The ``inputrec`` header
    is parsed from whatever was printed (it comes first: a dump stopped at the cap still has it)."""
    params: dict[str, str] = {}
    inputrec: dict[str, Any] = {}
    finger = ff = None
    path = run.fs.resolve(rel)
    gmx = shutil.which("gmx")
    if path is not None and gmx is not None and _regular(path):
        try:
            raw, rc = _bounded_output([gmx, "-quiet", "-nocopyright", "dump", "-s", str(path)], MAX_DUMP_BYTES, 60.0)
            text = raw[:MAX_DUMP_BYTES].decode("utf-8", "replace")
            head, _, topo = text.partition("topology:")
            for m in _DUMP_LINE.finditer(head):
                params.setdefault(m.group(1).replace("_", "-"), m.group(2))
            inputrec = parse_inputrec(text)
            if rc == 0 and len(raw) <= MAX_DUMP_BYTES and topo:
                moltypes = topo.split("moltype (", 1)[-1] if "moltype (" in topo else topo
                finger = (tuple(_LJ.findall(topo)), tuple(_ATOM.findall(moltypes)))
                ff = parse_dump_topology(topo)
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("gmx dump of %s failed: %s", rel, exc)
    return TprDump(params, finger, ff, inputrec)


def _equil_tpr(run: RunData, case: str) -> str | None:
    eq = _pick(run, case, "equil", ".tpr")
    npt = [e for e in eq if "npt" in e.rsplit("/", 1)[-1].lower()]
    return (npt or eq or [None])[-1]


def prefetch(run: RunData, prods: dict[str, Any]) -> None:
    """Start the ``gmx dump`` of every production and equilibration run input in threads (while the
    reanalysis runs), so that :func:`amend` finds them done."""
    if shutil.which("gmx") is None:
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    rels = [r for case, pf in prods.items() for r in (getattr(pf, "tpr", None), _equil_tpr(run, case)) if r]
    cpts = [pf.cpt for pf in prods.values() if getattr(pf, "cpt", None)]
    if not rels and not cpts:
        return
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mdbench-dump")
    futures = run.fs.__dict__.setdefault("_tpr_dump_futures", {})
    for rel in dict.fromkeys(rels):
        futures[rel] = pool.submit(_dump_now, run, rel)
    cp_futures = run.fs.__dict__.setdefault("_cpt_futures", {})
    for rel in dict.fromkeys(cpts):
        cp_futures[rel] = pool.submit(_checkpoint_time_now, run, rel)
    pool.shutdown(wait=False)


_CPT_T = re.compile(r"^t = ([-+0-9.eE]+)\s*$", re.M)


def _checkpoint_time_now(run: RunData, rel: str) -> float | None:
    """Simulation time [ps] a checkpoint was written at (``gmx dump -cp``), None when unreadable."""
    path = run.fs.resolve(rel)
    gmx = shutil.which("gmx")
    if path is None or gmx is None or not _regular(path):
        return None
    try:
        raw, rc = _bounded_output([gmx, "-quiet", "-nocopyright", "dump", "-cp", str(path)], 1 << 20, 60.0)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _CPT_T.search(raw[: 1 << 20].decode("utf-8", "replace"))
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def checkpoint_time(run: RunData, rel: str) -> float | None:
    """:func:`_checkpoint_time_now`, or its :func:`prefetch`."""
    fut = run.fs.__dict__.get("_cpt_futures", {}).pop(rel, None)
    if fut is not None:
        try:
            return fut.result(timeout=120)
        except Exception:  # noqa: BLE001
            pass
    return _checkpoint_time_now(run, rel)


def tpr_parameters(run: RunData, rel: str) -> dict[str, str]:
    """Run parameters of a ``.tpr`` (:func:`_dump`)."""
    return _dump(run, rel)[0]


_LJ_ROW = re.compile(r"^\s*functype\[(\d+)\]=LJ_SR,\s*c6=\s*([-+0-9.eE]+),\s*c12=\s*([-+0-9.eE]+)", re.M)
_ATOM_ROW = re.compile(r"^\s*atom\[\s*\d+\]=\{type=\s*(\d+),.*?\bq=\s*([-+0-9.eE]+)", re.M)
_TYPE_ROW = re.compile(r'^\s*type\[\d+\]=\{name="([^"]*)"', re.M)
_MOLNAME = re.compile(r'^\s*name="([^"]*)"', re.M)


def parse_dump_topology(topo: str) -> dict[str, Any] | None:
    """The force field of a ``gmx dump -s`` topology section: ``lj`` (atom type name → (C6, C12) of its
    self-interaction) and ``molecules`` (molecule type → [(atom type name, charge [e])])."""
    lj_rows = [(int(i), float(a), float(b)) for i, a, b in _LJ_ROW.findall(topo)]
    n = math.isqrt(len(lj_rows))
    if n == 0 or n * n != len(lj_rows):
        return None
    lj = {i: (a, b) for i, a, b in lj_rows}
    names: dict[int, str] = {}
    molecules: dict[str, list[tuple[str, float]]] = {}
    for block in topo.split("moltype (")[1:]:
        m = _MOLNAME.search(block)
        atoms = [(int(t), float(q)) for t, q in _ATOM_ROW.findall(block)]
        tnames = _TYPE_ROW.findall(block)
        if m is None or len(tnames) != len(atoms):
            continue
        for (t, _q), nm in zip(atoms, tnames):
            names.setdefault(t, nm)
        molecules.setdefault(m.group(1), [(nm, q) for (_t, q), nm in zip(atoms, tnames)])
    by_name: dict[str, tuple[float, float]] = {}
    for t, nm in names.items():
        if t < n and t * n + t in lj:
            by_name.setdefault(nm, lj[t * n + t])
    return {"lj": by_name, "molecules": molecules}
