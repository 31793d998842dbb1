"""Sim4 (and E5): the production trajectory is one continuous simulation of its run input (issue 45).

Checked before anything is read from the trajectory's physics, from what the audit pass has at hand:

* **frame times** (every frame header: :data:`mdbench.trajcheck` layout, nothing decompressed): uniform, and
  spaced by the run input's ``dt × nstxout-compressed`` (``gmx dump``, :mod:`mdbench.audit.production_protocol`)
  → ``trajectory_times_irregular``;
* **repeated frames**: every pair of frames compared on the molecular centres the reanalysis pass kept
  (:mod:`mdbench.analysis.reduce.centres`; without a reanalysis, the atoms Sim4 kept while decoding the
  frames, ``ProdFiles.frame_sample``; an evenly spaced subset of 256, each pair screened on 8 of them), under
  the minimum image of the box: a frame closer to an earlier one than :data:`REPEAT_FRACTION` of the typical
  frame-to-frame step is a (near-)repeat → ``trajectory_frames_repeated``;
* **splices**: the frame-to-frame displacement along the run; a step larger than :data:`JUMP_FACTOR` times the
  median step and :data:`JUMP_MAD` robust deviations above it is a jump between two trajectories →
  ``trajectory_splice``;
* **step numbers**: each frame's time is ``tinit + step × dt`` of the run input → ``trajectory_times_irregular``.

Whether the trajectory, log, checkpoint and ledger cover the same time is
``production_length_disagrees`` (:mod:`mdbench.audit.record_checks`), the energy file's end Sim4's own check.

Each failure names the frames (index and time) and lowers Sim4 to 0 (times not those of the run input,
frames repeated, a splice); where the run recorded the production valid, E5 is capped at ½. Cost: one header
walk of the xtc and the F²/2 frame pairs narrowed one coordinate at a time before the 8-centre screen
(:func:`_screened_pairs`; F frames: 2 ms for 400, 0.2 s for 2000); no frame is decoded twice, and the run
input's ``dt`` and output interval come from the one ``gmx dump`` the force-field checks run.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from mdbench.audit.codes import rule
from mdbench.audit.model import Evidence, Finding, Judgment, cap
from mdbench.audit.production_protocol import dump_inputrec
from mdbench.audit.simulation import SCREEN_CENTRES, sampled_atoms
from mdbench.trajcheck import _HEADER_BYTES, _LEAD, XTC_MAGIC, _frame_bytes, scan_xtc

log = logging.getLogger(__name__)

#: A frame closer to another (rms over the compared centres, minimum image) than this fraction of the median
#: frame-to-frame step is a repeat.
REPEAT_FRACTION = 0.1
#: Smallest rms distance [nm] still told apart from the xtc precision (1e-3 nm).
REPEAT_FLOOR_NM = 2.5e-3
#: A step larger than this factor times the median step ...
JUMP_FACTOR = 3.0
#: ... and this many scaled median absolute deviations above the median is a splice.
JUMP_MAD = 12.0
#: Above this many frames, only exact repeats are looked for (positions hashed, not every pair compared).
MAX_PAIR_FRAMES = 4000
#: Relative tolerance of frame spacing.
TIME_REL_TOL = 1e-3
#: Relative rounding of a float32 time (xtc frame headers), twice its machine epsilon.
FLOAT32_REL = 2.5e-7
#: The codes of this module (their item: Sim4; E5 where the record calls the production valid).
INTEGRITY_CODES = frozenset({"trajectory_times_irregular", "trajectory_frames_repeated", "trajectory_splice"})


def frame_headers(path: Any, max_frames: int = 10_000_000) -> tuple[np.ndarray, np.ndarray]:
    """(step, time [ps]) of every complete frame of an xtc, from the frame headers alone."""
    steps: list[int] = []
    times: list[float] = []
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        offset, natoms = 0, None
        while offset < size and len(steps) < max_frames:
            fh.seek(offset)
            head = fh.read(_HEADER_BYTES)
            if len(head) < _HEADER_BYTES:
                break
            magic, n, step, t = _LEAD.unpack_from(head)
            natoms = n if natoms is None else natoms
            length = _frame_bytes(head, natoms)
            if magic != XTC_MAGIC or n != natoms or length is None or offset + length > size:
                break
            steps.append(int(step))
            times.append(float(t))
            offset += length
    return np.asarray(steps, dtype=np.int64), np.asarray(times, dtype=np.float64)


def _frames(path: Any) -> tuple[np.ndarray, np.ndarray]:
    """(positions (F, n, 3) of :func:`sampled_atoms` [nm], orthorhombic box edges (F, 3) [nm]) of an xtc."""
    from MDAnalysis.lib.formats.libmdaxdr import XTCFile  # noqa: PLC0415

    n_frames = scan_xtc(path).n_frames or 1
    xs, boxes = [], []
    with XTCFile(str(path)) as fh:
        for frame in fh:
            xs.append(np.asarray(frame.x[sampled_atoms(frame.x.shape[0], n_frames)], dtype=np.float32))
            boxes.append(np.diag(np.asarray(frame.box, dtype=np.float64)))
    return np.asarray(xs, dtype=np.float64), np.asarray(boxes)


def _positions(pf: Any, run: Any, centres: Any, n_frames: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions (F, n, 3) [nm], box edges (F, 3) [nm]) compared: the reanalysis' centres, the atoms Sim4 kept
    while decoding the frames, else the xtc decoded here."""
    if centres is not None and len(centres.time_ps) == n_frames:
        com = np.concatenate([centres.com_by_species[sp] for sp in centres.species], axis=1)
        idx = sampled_atoms(com.shape[1], n_frames)
        box0 = _first_box(run.fs.resolve(pf.xtc))
        if box0 is None:
            return None
        vol = np.asarray(centres.volume_nm3, dtype=np.float64)
        scale = (vol / vol[0]) ** (1.0 / 3.0) if vol.size == n_frames and vol[0] > 0 else np.ones(n_frames)
        return np.asarray(com[:, idx], dtype=np.float64), box0[None, :] * scale[:, None]
    sample = getattr(pf, "frame_sample", None)
    if sample is not None and len(sample[0]) == n_frames:
        return sample
    try:
        return _frames(run.fs.resolve(pf.xtc))
    except Exception as exc:  # noqa: BLE001 - unreadable frames are Sim4's finding already
        log.info("trajectory integrity: frames not read: %s", exc)
        return None


def _first_box(path: Any) -> np.ndarray | None:
    try:
        box = scan_xtc(path).first_box_nm
    except Exception:  # noqa: BLE001
        return None
    return None if box is None else np.diag(np.asarray(box, dtype=np.float64).reshape(3, 3))


def _min_image(d: np.ndarray, box: np.ndarray) -> np.ndarray:
    return d - box * np.round(d / np.where(box > 0, box, np.inf))


def step_rms(x: np.ndarray, box: np.ndarray) -> np.ndarray:
    """rms displacement [nm] between consecutive frames (minimum image), (F-1,)."""
    d = _min_image(np.diff(x, axis=0), box[1:, None, :])
    return np.sqrt(np.mean(np.sum(d * d, axis=-1), axis=-1))


def _rms_to(x: np.ndarray, j: int, box: np.ndarray, earlier: np.ndarray | slice) -> np.ndarray:
    d = _min_image(x[earlier] - x[j][None], box[j][None, None, :])
    return np.sqrt(np.mean(np.sum(d * d, axis=-1), axis=-1))


def repeated_pairs(x: np.ndarray, box: np.ndarray, threshold_nm: float, max_pairs: int = 20) -> list[tuple[int, int]]:
    """(earlier, later) frame pairs whose rms distance under the minimum image is below ``threshold_nm``.

    Every pair is screened on :data:`SCREEN_CENTRES` of the compared centres (a repeat is close on any subset;
    twice the threshold), and the candidates are confirmed on all of them. Above :data:`MAX_PAIR_FRAMES`
    frames, frames whose positions in the box agree to the threshold's grid are repeats (exact copies)."""
    if x.shape[0] > MAX_PAIR_FRAMES:
        return _exact_repeats(x, box, threshold_nm, max_pairs)
    screen = x[:, np.linspace(0, x.shape[1] - 1, min(SCREEN_CENTRES, x.shape[1])).astype(int)]
    out: list[tuple[int, int]] = []
    for i, j in _screened_pairs(screen, box, 2.0 * threshold_nm):
        if _rms_to(x, j, box, np.asarray([i]))[0] < threshold_nm:
            out.append((i, j))
            if len(out) >= max_pairs:
                break
    return out


#: Pairs of frames whose single coordinate is compared at once (memory of one block of the screen).
_PAIR_BLOCK = 1 << 20


def _screened_pairs(screen: np.ndarray, box: np.ndarray, limit_nm: float) -> Any:
    """(i, j), i < j, in order of j then i, whose rms distance over the ``screen`` centres (minimum image in
    frame j's box, as :func:`_rms_to`) is below ``limit_nm``.

    An rms over s centres below the limit needs every one of their 3s coordinate differences below
    ``limit_nm`` × √s: the pairs are narrowed coordinate by coordinate on that bound (one number per pair,
    a few candidates left after two or three coordinates), and the survivors' rms computed as :func:`_rms_to`
    does — the same pairs as comparing every pair on all screen centres, at a fraction of the work."""
    n_frames, n_centres = screen.shape[0], screen.shape[1]
    bound = limit_nm * math.sqrt(n_centres) * (1 + 1e-9)   # the slack covers the rounding of the mean
    coords = [(c, k) for c in range(n_centres) for k in range(3)]
    j0 = 1
    while j0 < n_frames:
        rows = max(1, min(n_frames - j0, _PAIR_BLOCK // j0))
        js = np.arange(j0, j0 + rows)
        jj, ii = np.nonzero(np.arange(j0 + rows - 1)[None, :] < js[:, None])  # every earlier frame of each row
        jj = js[jj]
        for c, k in coords:
            if ii.size == 0:
                break
            d = _min_image(screen[ii, c, k] - screen[jj, c, k], box[jj, k])
            keep = np.abs(d) < bound
            ii, jj = ii[keep], jj[keep]
            if ii.size <= 64:
                break
        if ii.size:
            d = _min_image(screen[ii] - screen[jj], box[jj][:, None, :])
            close = np.sqrt(np.mean(np.sum(d * d, axis=-1), axis=-1)) < limit_nm
            yield from zip(ii[close].tolist(), jj[close].tolist())
        j0 += rows


def _exact_repeats(x: np.ndarray, box: np.ndarray, grid_nm: float, max_pairs: int) -> list[tuple[int, int]]:
    """Frames whose wrapped positions of :data:`SCREEN_CENTRES` centres fall on the same ``grid_nm`` grid."""
    screen = x[:, np.linspace(0, x.shape[1] - 1, min(SCREEN_CENTRES, x.shape[1])).astype(int)]
    seen: dict[bytes, int] = {}
    out: list[tuple[int, int]] = []
    for j in range(x.shape[0]):
        key = np.round(np.mod(screen[j], box[j]) / grid_nm).astype(np.int64).tobytes()
        if key in seen:
            out.append((seen[key], j))
            if len(out) >= max_pairs:
                break
        else:
            seen[key] = j
    return out


def jumps(steps: np.ndarray) -> list[int]:
    """Indices t of steps t → t+1 that stand out of the run's displacement statistics (a splice)."""
    if steps.size < 8:
        return []
    med = float(np.median(steps))
    mad = 1.4826 * float(np.median(np.abs(steps - med))) or 1e-12
    return [int(t) for t in np.flatnonzero((steps > JUMP_FACTOR * med) & (steps > med + JUMP_MAD * mad))]


def _frames_text(idx: list[int], times: np.ndarray) -> str:
    shown = ", ".join(f"{i} (t = {times[i]:.3f} ps)" if i < len(times) else str(i) for i in idx[:6])
    return shown + (f" and {len(idx) - 6} more" if len(idx) > 6 else "")


def checks(run: Any, case: str, pf: Any, centres: Any = None) -> list[tuple[str, str]]:
    """(code, message naming the frames) of every integrity failure of a case's production trajectory."""
    if pf is None or not getattr(pf, "readable", False) or pf.xtc is None:
        return []
    path = run.fs.resolve(pf.xtc)
    if path is None:
        return []
    steps, times = frame_headers(path)
    out: list[tuple[str, str]] = []
    if times.size < 3:
        return out
    dts = np.diff(times)
    spacing = float(np.median(dts))
    f32 = FLOAT32_REL * np.abs(times)   # xtc times are float32: their own rounding grows with t
    bad = np.flatnonzero(np.abs(dts - spacing) > TIME_REL_TOL * abs(spacing) + 1e-4 + 2 * f32[1:]) + 1
    if bad.size:
        out.append(("trajectory_times_irregular", f"frame times not uniform (spacing {spacing:g} ps): frames "
                                                  f"{_frames_text(bad.tolist(), times)}"))
    ir = dump_inputrec(run, pf.tpr) if pf.tpr else {}
    try:
        dt, nst, t0 = float(ir.get("dt", "nan")), int(ir.get("nstxout-compressed", 0)), float(ir.get("tinit", 0))
    except ValueError:
        dt, nst, t0 = math.nan, 0, 0.0
    if nst > 0 and math.isfinite(dt) and abs(spacing - dt * nst) > TIME_REL_TOL * dt * nst + 1e-4:
        out.append(("trajectory_times_irregular", f"frames every {spacing:g} ps, the run input writes every "
                                                  f"{dt * nst:g} ps (dt {dt:g} ps x nstxout-compressed {nst})"))
    if math.isfinite(dt) and dt > 0:
        off = np.flatnonzero(np.abs(t0 + steps * dt - times) > TIME_REL_TOL * max(dt * max(nst, 1), 1e-3) + 1e-4 + f32)
        if off.size:
            out.append(("trajectory_times_irregular", f"frame times are not their step numbers x dt {dt:g} ps: "
                                                      f"frames {_frames_text(off.tolist(), times)} (step "
                                                      f"{int(steps[off[0]])})"))
    got = _positions(pf, run, centres, times.size)
    if got is None:
        return out
    x, box = got
    s = step_rms(x, box)
    med = float(np.median(s)) if s.size else 0.0
    if med > 0:
        pairs = repeated_pairs(x, box, max(REPEAT_FRACTION * med, REPEAT_FLOOR_NM))
        if pairs:
            later = sorted({j for _i, j in pairs})
            out.append(("trajectory_frames_repeated", f"{len(later)}+ frame(s) repeat earlier ones (rms distance "
                        f"< {max(REPEAT_FRACTION * med, REPEAT_FLOOR_NM):.2g} nm, typical step {med:.3g} nm): "
                        + "; ".join(f"frame {j} (t = {times[j]:.3f} ps) = frame {i} (t = {times[i]:.3f} ps)"
                                    for i, j in pairs[:4])))
        jt = jumps(s)
        if jt:
            out.append(("trajectory_splice", f"displacement jumps between frames (median step {med:.3g} nm): "
                        + "; ".join(f"{s[t]:.3g} nm from frame {t} to {t + 1} (t = {times[t]:.3f} → "
                                    f"{times[t + 1]:.3f} ps)" for t in jt[:4])))
    return out


def apply(run: Any, case: str, pf: Any, centres: Any, judgments: list[Judgment]) -> list[Finding]:
    """Sim4 of ``case`` set to 0 by its trajectory's integrity failures (``judgments`` amended in place)."""
    found = checks(run, case, pf, centres)
    if not found:
        return []
    why = "production trajectory is not one continuous simulation of its run input: " + "; ".join(m for _c, m in found)
    for i, j in enumerate(judgments):
        if j.item == "Sim4" and j.case == case and j.observable is None:
            judgments[i] = cap(j, min(rule(c).lowers["Sim4"] for c, _m in found), why)
            judgments[i].evidence.append(Evidence(pf.xtc, note="frame headers and coordinates compared"))
    merged: dict[str, list[str]] = {}
    for code, msg in found:  # one finding per code and file (findings are de-duplicated by location)
        merged.setdefault(code, []).append(msg)
    return [Finding(code, "; ".join(msgs)[:900], pf.xtc, item="Sim4", case=case) for code, msgs in merged.items()]


def cap_consistency(run: Any, judgments: list[Judgment], findings: list[Finding]) -> list[Finding]:
    """E5 capped at ½ where the run recorded a production valid whose trajectory fails these checks."""
    out: list[Finding] = []
    for f in findings:
        if f.code not in INTEGRITY_CODES or f.item != "Sim4" or f.case is None:
            continue
        claimed = run.stage_state(f.case, "prod")
        if claimed is None or claimed.get("state") != "valid":
            continue
        msg = f"the record calls the production of {f.case} valid, but {f.message}"
        out.append(Finding(f.code, msg[:900], "run_record/stage_states.json", item="E5", case=f.case))
        for i, j in enumerate(judgments):
            if j.item == "E5" and j.case is None and j.observable is None:
                judgments[i] = cap(j, rule(f.code).lowers["E5"], msg[:600])
    return out
