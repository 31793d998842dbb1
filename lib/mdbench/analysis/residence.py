r"""Li⁺ residence times and ion-pair contact lifetimes: intermittent and continuous correlation functions.

A *pair* is a centre (a Li⁺) and one partner molecule; it is in contact at a structure frame when any
site of the registered channels lies within the registered cutoff: ``h_p(t) = 1``. From the neighbour
table of the one-pass reduction (no second pass), over every window (whole interval and four blocks):

* intermittent (Rapaport 1983; Luzar & Chandler 1996) — the normalised autocorrelation of ``h`` over every
  centre × partner-molecule pair ``p`` (``P`` of them) and every origin:

  .. math:: C_I(t) = \frac{\langle h(0)h(t)\rangle - \langle h\rangle^2}{\langle h\rangle - \langle h\rangle^2}

  (``⟨h(0)h(t)⟩`` over the origins that have a frame at ``t``; ``⟨h⟩`` over the window);
* continuous (Impey, Madden & McDonald, J. Phys. Chem. 87, 5071 (1983)) — ``H_p(t0, t) = 1`` while the pair
  stays in contact from ``t0`` to ``t0 + t`` without an absence longer than the tolerance ``t*`` (absences up
  to ``t*`` are filled, as ``MDAnalysis.lib.correlations.correct_intermittency`` does):

  .. math:: C_C(t) = \frac{\sum_p \sum_{t_0} \tilde h_p(t_0) H_p(t_0, t)}{\sum_p \sum_{t_0} \tilde h_p(t_0)}

* the lifetime :math:`\tau = \int_0^{t_z} C(t)\,dt` (trapezoid; ``t_z`` the first zero of the piecewise-linear
  ``C``), with lags up to a registered fraction of the block length. For a stay of ``L`` frames
  :math:`C_C(k\,\Delta t) = (L - k)/L` and :math:`\tau_C = L\Delta t/2`; for several stays
  :math:`\tau_C = \Delta t \sum L^2 / (2\sum L)` — for exponentially distributed stays, their mean.

Time resolution: the structure frames (every k-th frame of the trajectory when ``structure_max_frames``
strides them). A lifetime needs frames closer than itself: τ must span a registered number of them
(sampling check ``time_resolution``), the correlation must reach zero within the longest lag
(``decays_within_max_lag``) and the blocks must agree (``block_precision``); each failing check → SI.
A window without a single contact has no lifetime to measure: reported as too short (SI), not as a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from mdbench.analysis.adequacy import PrecisionBound, adequacy_checks
from mdbench.analysis.blocks import BlockEstimate, BlockWindows, _json_float, block_estimate
from mdbench.analysis.estimator import Estimate, EstimatorBase, Measurement, new_figure
from mdbench.analysis.observables import RESIDENCE_TIME
from mdbench.analysis.reduce import ReducedTrajectory
from mdbench.analysis.settings import AnalysisSettings, registered

#: The two correlation definitions, in the order results are written.
DEFINITIONS = ("intermittent", "continuous")
#: Elements of one dense block of the contact indicator (pairs × frames): memory stays bounded.
FFT_BLOCK_ELEMENTS = 1 << 22
#: Lags kept in results.json per curve (a longer curve is thinned evenly).
CURVE_POINTS = 200


@dataclass
class ContactSeries:
    """When each pair that is ever in contact is in contact, on the structure frames (sparse).

    Attributes
    ----------
    row, frame : ndarray (n,)
        One entry per (pair, frame) in contact; rows number the pairs seen (0..n_seen-1).
    n_seen : int
        Pairs in contact at least once.
    n_frames : int
        Structure frames.
    n_pairs : int
        Every centre × partner-molecule pair, in contact or not (``P``, the denominator of ``⟨h⟩``).
    dt_ps : float
        Spacing of the structure frames [ps] (the time resolution).
    """

    row: np.ndarray
    frame: np.ndarray
    n_seen: int
    n_frames: int
    n_pairs: int
    dt_ps: float

    def dense_chunks(self, max_elements: int | None = None) -> Iterator[np.ndarray]:
        """The indicator ``h[p, t]`` a block of pairs at a time (at most ``max_elements``, default
        :data:`FFT_BLOCK_ELEMENTS`: memory bounded whatever the run length)."""
        step = max(1, (max_elements or FFT_BLOCK_ELEMENTS) // max(self.n_frames, 1))
        row, frame = self.row, self.frame
        if self.n_seen > step:  # several blocks: entries grouped by pair once
            order = np.argsort(row, kind="stable")
            row, frame = row[order], frame[order]
        bounds = np.searchsorted(row, np.arange(0, self.n_seen + step, step)) if self.n_seen > step else [0, row.size]
        for k, a in enumerate(range(0, self.n_seen, step)):
            lo, hi = bounds[k], bounds[k + 1]
            h = np.zeros((min(step, self.n_seen - a), self.n_frames), dtype=bool)
            h[row[lo:hi] - a, frame[lo:hi]] = True
            yield h


def contact_series(rd: ReducedTrajectory, channels: list[str], cutoff_nm: float | dict[str, float],
                   partner_species: str) -> ContactSeries:
    """The contacts of (centre molecule, ``partner_species`` molecule) pairs, from the neighbour table.

    Parameters
    ----------
    rd : ReducedTrajectory
        Its structure frames (every frame of ``rd`` must carry neighbour data).
    channels : list of str
        Site channels whose sites make a contact (their union).
    cutoff_nm : float or dict
        One cutoff [nm] or one per channel.
    partner_species : str
        Species of the partner molecules (for the number of pairs).
    """
    names = [c.name for c in rd.channels]
    cut = np.full(len(names), -1.0)
    for ch in channels:
        cut[names.index(ch)] = cutoff_nm[ch] if isinstance(cutoff_nm, dict) else cutoff_nm
    if np.any(cut > rd.r_store_nm + 1e-9):
        raise ValueError(f"cutoff above the stored neighbour range {rd.r_store_nm} nm")
    ct = rd.contacts
    codes = np.flatnonzero(cut > 0)
    if codes.size == 1:  # one channel: its rows only (cached by the reduction)
        rows = rd.channel_rows(int(codes[0]))
        keep = rows[ct["dmin_nm"].take(rows) < cut[codes[0]]]
    else:
        cut_of_row = cut[ct["channel"]]
        keep = np.flatnonzero((cut_of_row > 0) & (ct["dmin_nm"] < cut_of_row))
    centres = np.unique(rd.centre_mol)
    n_mol = rd.mol_species.size
    pair = np.searchsorted(centres, rd.centre_mol[ct["centre"][keep]]).astype(np.int64) * n_mol + ct["partner"][keep]
    frame = ct["frame"][keep].astype(np.int64)
    seen, row = np.unique(pair, return_inverse=True)
    row = row.reshape(-1)
    if codes.size > 1:  # several channels of one pair in one frame count once
        _, first = np.unique(row * rd.n_frames + frame, return_index=True)
        row, frame = row[first], frame[first]
    dt = float(np.median(np.diff(rd.time_ps))) if rd.n_frames > 1 else float("nan")
    return ContactSeries(row, frame, int(seen.size), int(rd.n_frames),
                         int(centres.size * np.sum(rd.mol_species == partner_species)), dt)


@dataclass
class CorrelationSums:
    """What the two correlation functions of one window need, summed over blocks of pairs.

    Attributes
    ----------
    n_frames, max_lag : int
        Frames of the window and the longest lag [frames].
    tolerance_frames : int
        Absences up to this many frames do not end a stay (continuous definition).
    power : ndarray
        Σ_p |FFT h_p|² (zero-padded; its inverse transform is Σ_p Σ_t0 h(t0) h(t0+k)).
    contacts : float
        Σ_p Σ_t h(t).
    stay_lengths : ndarray
        Histogram of the stays (absences filled) by length [frames].
    present : ndarray
        Σ_p h̃(t) per frame (absences filled).
    """

    n_frames: int
    max_lag: int
    tolerance_frames: int
    power: np.ndarray = field(init=False)
    contacts: float = 0.0
    stay_lengths: np.ndarray = field(init=False)
    present: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        from scipy.fft import next_fast_len

        self._n_fft = next_fast_len(self.n_frames + self.max_lag)
        self.power = np.zeros(self._n_fft // 2 + 1)
        self.stay_lengths = np.zeros(max(self.max_lag + 2, self.n_frames + 1))
        self.present = np.zeros(self.n_frames)

    def add(self, h: np.ndarray) -> None:
        """Add the pairs of ``h`` (rows of pairs, columns the window's frames)."""
        from scipy.fft import rfft

        h = h[h.any(axis=1)]
        if h.shape[0] == 0:
            return
        self.contacts += float(h.sum())
        spec = rfft(h.astype(np.float64), self._n_fft, axis=1)
        self.power += np.einsum("pf,pf->f", spec.real, spec.real) + np.einsum("pf,pf->f", spec.imag, spec.imag)
        filled = fill_absences(h, self.tolerance_frames)
        edges = np.diff(np.pad(filled, ((0, 0), (1, 1))).astype(np.int8), axis=1).ravel()
        lengths = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)  # every stay, in frames
        self.stay_lengths += np.bincount(lengths, minlength=self.stay_lengths.size)
        self.present += filled.sum(axis=0)

    def intermittent(self, n_pairs: int) -> np.ndarray:
        """:math:`C_I(k)`, ``k = 0..max_lag``; NaN when the window has no contact or all pairs always touch."""
        from scipy.fft import irfft

        k = np.arange(self.max_lag + 1)
        mean = self.contacts / (n_pairs * self.n_frames) if n_pairs and self.n_frames else 0.0
        if self.contacts == 0 or mean >= 1.0:
            return np.full(k.size, np.nan)
        products = np.rint(irfft(self.power, self._n_fft)[k])  # Σ_p Σ_t0 h(t0) h(t0+k): integers
        joint = products / (n_pairs * (self.n_frames - k))
        return (joint - mean * mean) / (mean - mean * mean)

    def continuous(self) -> np.ndarray:
        """:math:`C_C(k)`, ``k = 0..max_lag``; NaN when the window has no contact."""
        k = np.arange(self.max_lag + 1)
        if self.contacts == 0:
            return np.full(k.size, np.nan)
        n_of = self.stay_lengths
        at_least = n_of[::-1].cumsum()[::-1]                                   # stays of ≥ L frames
        frames_at_least = (n_of * np.arange(n_of.size))[::-1].cumsum()[::-1]    # their frames
        stays = frames_at_least[k + 1] - k * at_least[k + 1]                   # Σ_stays (L − k)_+
        origins = np.cumsum(self.present)[self.n_frames - 1 - k]              # Σ_p h̃(t0), t0 ≤ F − 1 − k
        return np.divide(stays, origins, out=np.zeros(k.size), where=origins > 0)


def intermittent_correlation(h: np.ndarray, n_pairs: int, max_lag: int) -> np.ndarray:
    """:math:`C_I(k)` for ``k = 0..max_lag`` frames of one window (``h``: rows of pairs, all frames of it)."""
    sums = CorrelationSums(h.shape[1], max_lag, 0)
    sums.add(h)
    return sums.intermittent(n_pairs)


def fill_absences(h: np.ndarray, tolerance_frames: int) -> np.ndarray:
    """``h`` with every absence of at most ``tolerance_frames`` frames between two contacts filled."""
    filled = h.copy()
    if tolerance_frames < 1 or not h.any():
        return filled
    r, t = np.nonzero(h)  # row-major: by pair, then frame
    same = r[1:] == r[:-1]
    gap = t[1:] - t[:-1] - 1
    fill = np.flatnonzero(same & (gap >= 1) & (gap <= tolerance_frames))
    if fill.size:
        length = gap[fill]
        start = np.repeat(t[fill] + 1, length)
        offset = np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length)
        filled[np.repeat(r[fill], length), start + offset] = True
    return filled


def continuous_correlation(h: np.ndarray, max_lag: int, tolerance_frames: int) -> np.ndarray:
    """:math:`C_C(k)` for ``k = 0..max_lag`` frames of one window (NaN when it has no contact)."""
    sums = CorrelationSums(h.shape[1], max_lag, tolerance_frames)
    sums.add(h)
    return sums.continuous()


def lifetime_ps(c: np.ndarray, dt_ps: float) -> tuple[float, bool]:
    """(τ [ps], decayed): ∫ C dt from 0 to the first zero of the piecewise-linear C (trapezoid); when C stays
    positive to the longest lag, the integral to that lag and ``decayed`` False."""
    if c.size == 0 or not np.isfinite(c[0]):
        return float("nan"), False
    bad = np.flatnonzero(~np.isfinite(c) | (c <= 0))
    if bad.size == 0:
        return float(np.trapezoid(c, dx=dt_ps)), False
    z = int(bad[0])
    if not np.isfinite(c[z]):
        return float(np.trapezoid(c[:z], dx=dt_ps)), False
    cross = z - 1 + c[z - 1] / (c[z - 1] - c[z])                     # zero of the segment (z-1, z)
    return float(np.trapezoid(c[:z], dx=dt_ps) + 0.5 * c[z - 1] * (cross - (z - 1)) * dt_ps), True


@dataclass
class LifetimeResult:
    """Lifetime of one pair definition by one correlation definition: whole interval and blocks.

    Attributes
    ----------
    definition : str
        ``intermittent`` or ``continuous``.
    tau : BlockEstimate
        τ [ps].
    lag_ps : ndarray
        Lag grid of the whole-interval curve [ps].
    correlation : ndarray
        ``C(t)`` of the whole interval.
    decayed : list of bool
        Whole interval, then each block: C reached zero within the longest lag.
    dt_ps, tolerance_ps, max_lag_ps : float
        Time resolution (structure-frame spacing), tolerance of the continuous definition, longest lag [ps].
    n_pairs_in_contact : int
        Pairs in contact at least once in the whole interval.
    """

    definition: str
    tau: BlockEstimate
    lag_ps: np.ndarray
    correlation: np.ndarray
    decayed: list[bool]
    dt_ps: float
    tolerance_ps: float
    max_lag_ps: float
    n_pairs_in_contact: int
    min_frames_per_tau: float
    max_rel_half_width: float
    failures: list[str] = field(default_factory=list)
    trend_alpha: float = field(default_factory=lambda: registered(None, "block_trend_alpha"))

    def _checks(self) -> tuple[dict[str, bool], dict[str, str]]:
        tau = self.tau.whole
        precise, details = adequacy_checks("", self.tau, PrecisionBound(rel=self.max_rel_half_width), self.trend_alpha)
        checks = {"decays_within_max_lag": bool(all(self.decayed)),
                  "time_resolution": bool(np.isfinite(tau) and tau >= self.min_frames_per_tau * self.dt_ps),
                  **precise}
        details["time_resolution"] = f"tau {tau:.3g} ps vs {self.min_frames_per_tau:g} x {self.dt_ps:g} ps frames"
        return checks, details

    def sampling_checks(self) -> dict[str, bool]:
        """Decay within the longest lag (whole and every block), time resolution, precision, no block trend."""
        return self._checks()[0]

    @property
    def too_short(self) -> str | None:
        """Set when a window held no contact at all: no stay to time (a sampling shortfall)."""
        if self.n_pairs_in_contact == 0 or not all(np.isfinite([self.tau.whole, *self.tau.blocks])):
            return "a window without any contact of this pair definition: no stay to time"
        return None

    def state_inputs(self) -> dict[str, Any]:
        """Inputs of :func:`mdbench.analysis.states.classify_observable`."""
        checks, details = self._checks()
        return {"values": [self.tau.whole, *self.tau.blocks], "failures": list(self.failures),
                "sampling_checks": checks, "check_details": details, "too_short": self.too_short}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: value, unit, uncertainty, blocks, window and diagnostics (resolution declared)."""
        d = self.tau.to_dict()
        stride = max(1, int(np.ceil(self.lag_ps.size / CURVE_POINTS)))
        d.update(
            window={"max_lag_ps": _json_float(self.max_lag_ps), "integration": "0 to the first zero of C(t)"},
            diagnostics={"time_resolution_ps": _json_float(self.dt_ps), "tolerance_ps": self.tolerance_ps,
                         "decayed": {"whole": self.decayed[0], "blocks": self.decayed[1:]},
                         "n_pairs_in_contact": self.n_pairs_in_contact, "sampling_checks": self.sampling_checks(),
                         "too_short": self.too_short, "failures": list(self.failures)},
            curve={"lag_ps": [_json_float(x) for x in self.lag_ps[::stride]],
                   "correlation": [_json_float(x) for x in self.correlation[::stride]]})
        return d


def lifetimes(rd: ReducedTrajectory, windows: BlockWindows, channels: list[str], cutoff_nm: float | dict[str, float],
              partner_species: str, *, tolerance_ps: float | None = None, max_lag_fraction: float | None = None,
              min_frames_per_tau: float | None = None, max_rel_half_width: float | None = None,
              trend_alpha: float | None = None) -> dict[str, LifetimeResult]:
    """Intermittent and continuous lifetimes of one pair definition (see the module docstring).

    Parameters
    ----------
    rd : ReducedTrajectory
        Structure frames (each carries neighbour data).
    windows : BlockWindows
        Whole interval and blocks on the frames of ``rd``.
    channels, cutoff_nm, partner_species
        The pair definition (:func:`contact_series`).
    tolerance_ps : float
        Absences up to this long do not end a stay (continuous definition) [ps].
    max_lag_fraction : float
        Longest lag as a fraction of the block length.
    min_frames_per_tau, max_rel_half_width : float
        Sampling thresholds (time resolution; block half-width / τ).
    trend_alpha : float
        Blocks' OLS slope with a p-value below this fails ``block_trend``.

    Each threshold left None is the registered setting (``lifetime_tolerance_ps``, ``lifetime_max_lag_fraction``,
    ``lifetime_min_frames_per_tau``, ``lifetime_max_rel_half_width``, ``block_trend_alpha``).

    Returns
    -------
    dict
        ``intermittent`` / ``continuous`` → :class:`LifetimeResult`.
    """
    tolerance_ps = registered(tolerance_ps, "lifetime_tolerance_ps")
    max_lag_fraction = registered(max_lag_fraction, "lifetime_max_lag_fraction")
    min_frames_per_tau = registered(min_frames_per_tau, "lifetime_min_frames_per_tau")
    max_rel_half_width = registered(max_rel_half_width, "lifetime_max_rel_half_width")
    trend_alpha = registered(trend_alpha, "block_trend_alpha")
    series = contact_series(rd, channels, cutoff_nm, partner_species)
    dt = series.dt_ps
    max_lag = max(2, int(max_lag_fraction * windows.frames_per_block))
    tol_frames = int(np.floor(tolerance_ps / dt + 1e-9)) if np.isfinite(dt) and dt > 0 else 0
    spans = [windows.whole, *windows.blocks]
    sums = []
    for w in spans:
        n = len(range(*w.indices(series.n_frames)))
        sums.append(CorrelationSums(n, min(max_lag, n - 1), tol_frames))
    in_contact = 0
    for h in series.dense_chunks():  # every window's sums, one block of pairs at a time
        in_contact += int(h[:, spans[0]].any(axis=1).sum())
        for w, acc in zip(spans, sums):
            acc.add(h[:, w])
    out = {}
    for definition in DEFINITIONS:
        curves = [acc.intermittent(series.n_pairs) if definition == "intermittent" else acc.continuous()
                  for acc in sums]
        taus, decayed = zip(*(lifetime_ps(c, dt) for c in curves))
        est = block_estimate(taus[0], list(taus[1:]), "ps", block_ranges_ps=windows.block_ranges_ps)
        out[definition] = LifetimeResult(
            definition, est, np.arange(curves[0].size) * dt, curves[0], list(decayed), dt,
            float(tolerance_ps) if definition == "continuous" else 0.0, max_lag * dt, in_contact,
            min_frames_per_tau, max_rel_half_width, trend_alpha=trend_alpha)
    return out


class _LifetimeEstimator(EstimatorBase):
    """Common part of the two registered lifetime estimators."""

    inputs = ("structure_frames", "structure_windows", "treatment", "products.cutoffs")

    def _measure(self, qualifier: str, pairs: str, channels: list[str], cutoff: float | dict[str, float],
                 partner: str) -> list[Measurement]:
        s, c, entry = self.settings, self.case, self.entries[0]
        res = lifetimes(c.structure_frames, c.structure_windows, channels, cutoff, partner,
                        tolerance_ps=s.lifetime_tolerance_ps, max_lag_fraction=s.lifetime_max_lag_fraction,
                        min_frames_per_tau=s.lifetime_min_frames_per_tau,
                        max_rel_half_width=s.lifetime_max_rel_half_width, trend_alpha=s.block_trend_alpha)
        out = []
        for definition, r in res.items():
            d = r.to_dict()
            d["diagnostics"] = dict(d["diagnostics"], **c.treatment)
            curve = d.pop("curve")
            out.append(Measurement(entry, (qualifier, definition), d,
                                   f"{definition} {pairs}: tau = integral of C(t) to its first zero "
                                   f"(time resolution {r.dt_ps:g} ps)", r.state_inputs(),
                                   details={"curve": curve, "cutoff_nm": cutoff, "channels": channels}))
        return out


    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Registered as ``analysis_shell_dynamics`` (residence times and contact lifetimes alike)."""
        s = settings
        return {"analysis_shell_dynamics": {
            "pairs": "(centre, partner molecule) with any site of the channel within r_c: residence times use "
                     "each Li-O channel's coordination cutoff (first minimum, else the fixed cutoff); contact "
                     "lifetimes the registered cation-anion contact definition",
            "intermittent": "C_I(t) = (<h(0)h(t)> - <h>^2) / (<h> - <h>^2) over every centre x partner-molecule "
                            "pair and every time origin of the window (h = 1 in the shell)",
            "continuous": "C_C(t) = <h(0)H(t)> / <h>, H = 1 while the pair stays in the shell without an "
                          f"absence longer than {s.lifetime_tolerance_ps:g} ps (absences up to that are filled)",
            "tolerance_ps": s.lifetime_tolerance_ps,
            "lifetime": "tau = integral of C(t) dt (trapezoid) from 0 to its first zero, lags up to "
                        f"{s.lifetime_max_lag_fraction:g} of the block length",
            "time_resolution": "the structure frames (every k-th frame, see analysis_rdf_coordination): dt_s is "
                               "declared with each result; tau must span at least "
                               f"{s.lifetime_min_frames_per_tau:g} of them",
        }}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """The intermittent and continuous shell correlation functions (residence times and contact
        lifetimes share this figure: :func:`mdbench.analysis.results.write_figures` hands it both estimates)."""
        curves = [m for m in estimate.measurements if m.details.get("curve")]
        if not curves:
            return {}
        fig, axes = new_figure(2, figsize=(10, 4), sharey=True)
        for ax, kind in zip(axes, ("intermittent", "continuous")):
            for m in (m for m in curves if m.qualifiers[-1] == kind):
                c = m.details["curve"]
                ax.plot(c["lag_ps"], [np.nan if v is None else v for v in c["correlation"]],
                        label=f"{m.entry.name}/{m.qualifiers[0]} (τ = {m.payload.get('value') or float('nan'):.3g} ps)")
            ax.axhline(0.0, color="0.6", lw=0.8)
            ax.set_xlabel("lag [ps]")
            ax.set_title(f"{kind} C(t)", fontsize=9)
            ax.legend(fontsize=6)
        axes[0].set_ylabel("C(t)")
        return {RESIDENCE_TIME.figure: fig}


class ResidenceTimeEstimator(_LifetimeEstimator):
    """Registered estimator of :data:`mdbench.analysis.observables.RESIDENCE_TIME`: each Li–O channel's
    first-shell partners (the channel's coordination cutoff)."""

    def compute(self) -> Estimate:
        rd, cutoffs = self.case.structure_frames, self.case.products["cutoffs"]
        out = []
        for ch in rd.channels:
            if ch.label.startswith("O") and ch.name in cutoffs:
                out += self._measure(ch.name, f"residence of {ch.species} molecules with a {ch.name} site within "
                                     f"{cutoffs[ch.name]:.3f} nm of the centre", [ch.name], cutoffs[ch.name],
                                     ch.species)
        return Estimate(out, figure_data={"lifetimes": out})


class ContactLifetimeEstimator(_LifetimeEstimator):
    """Registered estimator of :data:`mdbench.analysis.observables.CONTACT_LIFETIME`: the cation–anion
    contact of the registered definition (the one association uses, shared as ``contacts``)."""

    inputs = _LifetimeEstimator.inputs + ("products.contacts",)

    def compute(self) -> Estimate:
        out = []
        for anion, (chans, rc, rule) in self.case.products["contacts"].items():
            out += self._measure(anion, f"cation-{anion} contact ({'/'.join(chans)} within {rc} nm, {rule})",
                                 chans, rc, anion)
        return Estimate(out, figure_data={"contact_lifetimes": out})


__all__ = ["ContactLifetimeEstimator", "ContactSeries", "CorrelationSums", "LifetimeResult", "ResidenceTimeEstimator",
           "contact_series", "continuous_correlation", "fill_absences", "intermittent_correlation", "lifetime_ps",
           "lifetimes"]
