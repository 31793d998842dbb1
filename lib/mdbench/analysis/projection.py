"""What it would take to earn an SI result: the production length projected to make it C, and the
extend-or-stop decision that follows.

**Precision** (a ``*block_precision`` check failed). The registered uncertainty is the 95 % half-width of
four block means over the analysed window of length T. For blocks longer than the correlation time the
variance of a block mean falls as 1/(block length), so the half-width scales as hw(T') = hw(T)·(T/T')^½ and
the window that meets the registered bound b is

    T_C = T · (hw / b)²,

where b is the bound the analysis states with the check (``accepted <= 20% of |value|`` → 0.2·|value|;
``accepted <= 0.1`` → 0.1). The half-width itself comes from n = 4 blocks: its 68 % interval is
s·[√(ν/χ²₀.₈₄,ν), √(ν/χ²₀.₁₆,ν)] with ν = n − 1, which gives the projection's range. That scatter, not the
scaling, dominated the projection's error (issue 46). For D the half-width projected from is therefore the
case's pooled one (:func:`pooled_relative_half_widths`: the relative block variance of an MSD slope times the
molecule count is one constant per case, Qian, Sheetz & Elson, Biophys. J. 60, 910 (1991)), with
ν = k(n − 1) for k species, times the median of s/σ for n blocks (:func:`pooled_half_width`).

**Diffusive window** (``diffusive_window`` failed). The registered rule needs a run of lags with
β = d ln MSD / d ln t within its band over ``min_window_decades``, below ``max_lag_fraction`` of the block
length. Where no such run exists, β is extrapolated linearly in ln t from the fallback window's
(β_min, β_max) to the band's lower edge; the window needs t_hi = t_band·10^decades ≤ f·T/n, so
T_C = n·t_hi / f. Without a rising β this is not credible.

**Lags that grow with the block** (σ, σ_NE, the ionicity and t+: the collective-transport estimator fits
over lags [f_lo, f_hi] × block length, ``onsager_fit_window_fraction``). The relative scatter of such a
block estimate does not fall with length: in the diffusive regime the relative variance of an MSD at lag t
from a window L is ∝ t/L per molecule (Qian, Sheetz & Elson, Biophys. J. 60, 910 (1991)), constant when
t ∝ L; in a sub-diffusive (power-law) MSD the block estimate at length L is a statistic of the motion at
time scale L, equally scale-free. Measured (docs/performance.md, "σ_NE and σ"): σ_NE's relative half-width
after 4× the production against the one before, median 1.31, 10/13 within a factor 1.5 and 12/13 within 2 on
tiny productions (the (T/T′)^½ rule was off by a median factor of about 2.5). Its precision is therefore projected at
the length where the window leaves the sub-diffusive regime, whose scatter is far above the diffusive
asymptote (:func:`collective_onset_length`: the window's start f_lo × block length past the latest lag at
which an ion's MSD exponent reaches the registered band; range a factor 3), and, where the window is
already past it, as not earned by extension at all — more blocks or a registered fixed lag window (a method
revision) would narrow it. The history rule compares these results' half-widths against no change with
length (:func:`half_width_exponent`).

**Blocks against the correlation time.** The 1/(block length) scaling holds only for blocks much longer
than the integrated correlation time τ of what they average. For an exponentially correlated series the
variance of a mean over L is (2τσ²/L)·f(L/τ), f(x) = 1 − (1 − e^(−x))/x, so blocks of L understate the
asymptotic variance by the factor f: 0.57 at 2 τ, 0.68 at 3 τ, 0.90 at 10 τ. Where the result records τ of its
per-frame series (``uncertainty.correlation_time_ps`` of a frame average, ``diagnostics.correlation_time_ps``
of a thermodynamic average; pymbar's estimator over the analysed window), the precision projection divides
T_C by f(L/τ) (the half-width the blocks would show once they outlast τ; conservative, as f → 1 at T_C), and
is credible only when a block is at least :data:`MIN_BLOCK_CORRELATION_TIMES` × τ long
(:func:`blocks_outlast_correlation`): below, the blocks mostly measure the series' slow drift, the factor is
steep in τ, and τ itself, estimated from a window of fewer than 12 τ, is biased low. Otherwise the projection
is recorded with its length but is not credible, and the decision rule does not extend for it.

**The half-width's history.** A τ estimated from a window that does not yet contain the slow mode is too
short, so the condition above is necessary, not sufficient. The record shows the rest: each decision keeps the
half-width and analysed length of every result of its case (:func:`half_width_snapshot`); at the next decision,
a result whose half-width rose against the (T/T′)^½ expectation by more than two four-block estimates allow
(q = (hw′/hw)·(T′/T)^½ above √F₀.₉₅(n−1, n−1), 3.05 for four blocks: :func:`half_width_rose`) is not credibly
projected — its blocks are shorter than its slowest relaxation.

Anything else that failed (a trend over the blocks, a plateau that was not found, an RDF minimum that moves)
cannot be projected from one segment: the projection says so and is not credible. A derived result
(``derived_from``) needs its inputs: its projection is the largest of theirs and its own.

References: Flyvbjerg & Petersen, J. Chem. Phys. 91, 461 (1989) (block averaging); Grossfield et al.,
LiveCoMS 1, 5067 (2019) (best practices for uncertainty quantification).
"""

from __future__ import annotations

import math
import re
from typing import Any

from scipy import stats

from mdbench.analysis.blocks import _json_float as _f  # finite float, else None
from mdbench.analysis.observables import CONDUCTIVITY, SELF_DIFFUSION, TRANSFERENCE
from mdbench.record.state_graph import topological_order

#: The rule recorded with every projection (and registered with the decisions).
PROJECTION_RULE = (
    "precision: T_C = T (hw/b)^2 (block-mean variance ~ 1/block length; b = the registered bound stated with "
    "the check), range from the 68 % chi-square interval of a 4-block standard deviation; for D the relative "
    "block variance times the molecule count pooled over the case's species (k(n-1) dof), projected as the "
    "median half-width n blocks will give; diffusive window: "
    "beta extrapolated linearly in ln t to the band's lower edge, window of the registered decades below "
    "max_lag_fraction x block length; collective regime (sigma, ionicity, t+): the registered charge-MSD "
    "window's start (f_lo x block length) past the latest lag at which an ion's MSD beta reaches the band; "
    "precision of a fit over lags that are a fixed fraction of the block (sigma, sigma_NE, ionicity, t+): "
    "relative half-width independent of length, projected at the collective-regime length, not earned by "
    "extension once the window is past it; "
    "a failing trend, plateau or other check: not projectable (not "
    "credible); a derived result: the largest of its inputs' projections and its own; a precision projection "
    "of a result whose per-frame correlation time tau is recorded: T_C / f(L/tau), f(x) = 1 - (1 - exp(-x))/x "
    "for blocks of length L, credible only when a block is at least 3 tau long; not credible after an extension "
    "in which its half-width rose against the (T/T')^1/2 expectation (no change for lags that grow with the "
    "block) by more than sqrt(F_0.95(n-1, n-1))"
)
#: A precision projection is credible only for blocks at least this many correlation times long (their variance
#: then at least 68 % of its 1/length asymptote, for an exponential correlation, and corrected by that factor).
MIN_BLOCK_CORRELATION_TIMES = 3.0
#: Results whose block half-width is pooled over the case's species (:func:`pooled_relative_half_widths`).
D_PREFIX = SELF_DIFFUSION.key("")
#: Results the collective-transport estimator fits over lags that are a fixed fraction of the block length
#: (``onsager_fit_window_fraction``): their relative half-width does not fall with length.
LAG_FRACTION_PREFIXES = (CONDUCTIVITY.key(""), TRANSFERENCE.key(""))
_BOUND = re.compile(r"accepted <= ([0-9.eE+-]+)(%)?( of \|value\|)?(?: or <= ([0-9.eE+-]+))?")


def _window_ps(obs: dict[str, Any], case_windows: dict[str, Any]) -> tuple[float, float, int] | None:
    """(guard [ps], analysed length T [ps], number of blocks) of one result (the case's windows where the
    result does not state its own)."""
    diag = obs.get("diagnostics") if isinstance(obs.get("diagnostics"), dict) else {}
    win = diag.get("analysis_windows") or case_windows or {}
    rng = win.get("whole_range_ps") or diag.get("computed_on_ps")
    if not isinstance(rng, list) or len(rng) != 2 or _f(rng[0]) is None or _f(rng[1]) is None:
        return None
    length = float(rng[1]) - float(rng[0])
    n = int(win.get("n_blocks") or 4)
    return float(win.get("guard_ps") or rng[0] or 0.0), length + float(win.get("dt_ps") or 0.0), n


def half_width_range_factor(n_blocks: int, dof: int | None = None) -> tuple[float, float]:
    """(low, high) factors on a block half-width: the 68 % interval of σ given s from ``n_blocks`` blocks
    (or from a pooled variance with ``dof`` degrees of freedom).

    >>> lo, hi = half_width_range_factor(4)
    >>> round(lo, 2), round(hi, 2)
    (0.76, 1.89)
    >>> [round(x, 2) for x in half_width_range_factor(4, dof=9)]
    [0.83, 1.35]
    """
    nu = max(1, dof if dof is not None else n_blocks - 1)
    return math.sqrt(nu / stats.chi2.ppf(0.84, nu)), math.sqrt(nu / stats.chi2.ppf(0.16, nu))


def pooled_relative_half_widths(doc: dict[str, Any]) -> dict[str, tuple[float, int]]:
    """Species → (relative 95 % half-width of its D, degrees of freedom): the case's D block variances pooled.

    The block value of D is the slope of the MSD averaged over the N molecules of the species, fitted over the
    same lag window in blocks of the same length for every species of the case; the relative variance of an
    MSD at lag t from a window T is ~ 2t/(3T) per molecule whatever D is (Qian, Sheetz & Elson, Biophys. J. 60,
    910 (1991)), so (hw/D)^2 N estimates one constant per case. Its mean over the k species is a pooled
    variance with k (n_blocks - 1) degrees of freedom instead of n_blocks - 1: the relative half-width of
    species i is then (mean_j (hw_j/D_j)^2 N_j / N_i)^1/2. Four blocks alone scatter a half-width by a factor
    0.76-1.89 (68 %); pooled over three species (9 dof), 0.83-1.35. Species without a finite D, half-width or
    molecule count are left out; fewer than two: {}.

    >>> doc = {"system": {"n_molecules": {"A": 10, "B": 40}}, "windows": {"n_blocks": 4}, "observables": {
    ...     "self_diffusion/A": {"value": 1.0, "uncertainty": {"half_width_95": 0.4}},
    ...     "self_diffusion/B": {"value": 2.0, "uncertainty": {"half_width_95": 0.2}}}}
    >>> {k: (round(v, 3), dof) for k, (v, dof) in pooled_relative_half_widths(doc).items()}
    {'A': (0.316, 6), 'B': (0.158, 6)}
    """
    counts = _dict(_dict(doc.get("system")).get("n_molecules"))
    n_blocks = _n_blocks(doc)
    terms: dict[str, tuple[float, int]] = {}
    for name, obs in _dict(doc.get("observables")).items():
        if not (isinstance(name, str) and name.startswith(D_PREFIX) and isinstance(obs, dict)):
            continue
        sp = name[len(D_PREFIX):]
        unc = obs.get("uncertainty") if isinstance(obs.get("uncertainty"), dict) else {}
        value, hw, n = _f(obs.get("value")), _f(unc.get("half_width_95")), _f(counts.get(sp))
        if value and hw is not None and n and n > 0:
            terms[sp] = ((hw / value) ** 2 * n, int(n))
    if len(terms) < 2:
        return {}
    c = math.fsum(t for t, _ in terms.values()) / len(terms)
    dof = len(terms) * max(1, n_blocks - 1)
    return {sp: (math.sqrt(c / n), dof) for sp, (_, n) in terms.items()}


def pooled_half_width(doc: dict[str, Any], name: str) -> tuple[float, int] | None:
    """(95 % half-width, degrees of freedom) of the result ``name`` from the case's pooled D variances
    (:func:`pooled_relative_half_widths`): D of a species; None for other results or where pooling is not
    possible.

    The half-width returned is the *median* of the one n blocks will give (what the registered check will
    read): the pooled variance estimates σ² itself, while n blocks give s with s²/σ² ~ χ²(n−1)/(n−1), whose
    median is 0.888 for n = 4 (for a result's own four-block s no such factor: the s it has and the s it will
    get are draws of the same law). sigma_NE is not pooled: the collective-transport estimator fits its own
    D's over lags [0.05, 0.25] x block length, not the self-diffusion windows, so their half-widths do not
    carry over (propagated, they gave 2.6-6x sigma_NE's own half-width on micro; docs/performance.md).

    >>> doc = {"system": {"n_molecules": {"A": 10, "B": 40}}, "windows": {"n_blocks": 4}, "observables": {
    ...     "self_diffusion/A": {"value": 1.0, "uncertainty": {"half_width_95": 0.4}},
    ...     "self_diffusion/B": {"value": 2.0, "uncertainty": {"half_width_95": 0.2}}}}
    >>> hw, dof = pooled_half_width(doc, "self_diffusion/A")
    >>> round(hw, 3), dof
    (0.281, 6)
    """
    value = _f(_dict(_dict(doc.get("observables")).get(name)).get("value"))
    pooled = pooled_relative_half_widths(doc) if name.startswith(D_PREFIX) else {}
    if name[len(D_PREFIX):] not in pooled or value is None:
        return None
    rel, dof = pooled[name[len(D_PREFIX):]]
    nu = max(1, _n_blocks(doc) - 1)
    return rel * abs(value) * math.sqrt(stats.chi2.ppf(0.5, nu) / nu), dof


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def correlation_time_ps(obs: dict[str, Any]) -> float | None:
    """The integrated correlation time [ps] of the per-frame series a result averages, where the analysis
    recorded it (a frame average's ``uncertainty``, a thermodynamic average's ``diagnostics``); else None."""
    for where in (_dict(obs.get("uncertainty")), _dict(obs.get("diagnostics"))):
        tau = _f(where.get("correlation_time_ps"))
        if tau is not None and tau >= 0:
            return tau
    return None


def blocks_outlast_correlation(block_length_ps: float | None, tau_ps: float | None) -> bool | None:
    """Whether blocks of ``block_length_ps`` are at least :data:`MIN_BLOCK_CORRELATION_TIMES` correlation
    times ``tau_ps`` long (None when either is unknown: the condition cannot be checked).

    >>> blocks_outlast_correlation(267.0, 77.5), blocks_outlast_correlation(267.0, 90.7)
    (True, False)
    """
    if block_length_ps is None or tau_ps is None or not math.isfinite(block_length_ps) or not math.isfinite(tau_ps):
        return None
    return bool(block_length_ps >= MIN_BLOCK_CORRELATION_TIMES * tau_ps)


def block_variance_fraction(block_length_ps: float, tau_ps: float | None) -> float:
    """f(L/τ) = 1 − (1 − e^(−L/τ))/(L/τ): the variance of a mean over blocks of L relative to its 1/L
    asymptote, for an exponentially correlated series of integrated correlation time τ (1 when τ is 0 or
    unknown).

    >>> round(block_variance_fraction(30.0, 10.0), 3), block_variance_fraction(30.0, None)
    (0.683, 1.0)
    """
    if tau_ps is None or not tau_ps > 0 or not block_length_ps > 0:
        return 1.0
    x = block_length_ps / tau_ps
    return float(1.0 - (1.0 - math.exp(-x)) / x)


def _n_blocks(doc: dict[str, Any]) -> int:
    """The case's block count (results.json ``windows``; the registered 4 where it is not a small integer)."""
    n = _f(_dict(doc.get("windows")).get("n_blocks"))
    return int(n) if n is not None and 2 <= n <= 1000 and n == int(n) else 4


def precision_length(length_ps: float, half_width: float, bound: float, n_blocks: int, dof: int | None = None
                     ) -> tuple[float, float, float]:
    """(T_C, low, high) [ps]: the analysed length at which the half-width of ``n_blocks`` blocks meets ``bound``.

    >>> precision_length(40.0, 0.4, 0.2, 4)[0]
    160.0
    """
    t_c = length_ps * (half_width / bound) ** 2
    lo, hi = half_width_range_factor(n_blocks, dof)
    return t_c, t_c * lo ** 2, t_c * hi ** 2


def _bound(detail: str, value: float | None) -> float | None:
    m = _BOUND.search(detail or "")
    if not m:
        return None
    x = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    rel = m.group(3) is not None
    b = x * abs(value) if rel and value is not None else (None if rel else x)
    if m.group(4) is not None:  # "or <= abs": the easier of the two
        b = max(b or 0.0, float(m.group(4)))
    return b if b and b > 0 else None


def _failing(obs: dict[str, Any], reason: str) -> dict[str, str]:
    """Failing check → its detail: the checks the recorded reason names (``failed: name (detail); …``), with
    the analysis' ``check_details`` where it wrote them."""
    diag = obs.get("diagnostics") if isinstance(obs.get("diagnostics"), dict) else {}
    details = diag.get("check_details") if isinstance(diag.get("check_details"), dict) else {}
    out: dict[str, str] = {}
    if "failed: " not in reason:
        return out
    for part in reason.split("failed: ", 1)[1].split("); "):
        name, _, detail = part.partition(" (")
        if re.fullmatch(r"[A-Za-z0-9_+:.@-]+", name.strip()):
            out[name.strip()] = str(details.get(name.strip()) or detail.rstrip(")"))
    return out


_SPREAD = re.compile(r"plateaus ([0-9.eE+-]+) \(<= ([0-9.eE+-]+)\)")


def _beta_onset(obs: dict[str, Any], beta_lo: float) -> float | None:
    """Lag [ps] where the MSD exponent β of a D result reaches ``beta_lo``: the window's start where β is
    already there, else β extrapolated linearly in ln t from the window's (β_min, β_max); None without a
    rising β."""
    win = obs.get("window") if isinstance(obs.get("window"), dict) else {}
    lo, hi = _f(win.get("lo_ps")), _f(win.get("hi_ps"))
    b_min, b_max, dec = _f(win.get("beta_min")), _f(win.get("beta_max")), _f(win.get("decades"))
    if None in (lo, hi, b_min, b_max) or not dec:
        return None
    if b_min >= beta_lo:
        return lo
    slope = (b_max - b_min) / dec
    decades = (beta_lo - b_max) / slope if slope > 0.01 else math.inf
    return hi * 10 ** decades if decades <= 12 else None  # beyond 12 decades: no credible extrapolation


def _diffusive_length(obs: dict[str, Any], settings: dict[str, Any], n_blocks: int) -> tuple[float, str] | None:
    band = settings.get("diffusion_beta_range") or [0.9, 1.1]
    need_dec = _f(settings.get("diffusion_min_decades")) or 0.9
    frac = _f(settings.get("diffusion_max_lag_fraction")) or 0.5
    win = obs.get("window") if isinstance(obs.get("window"), dict) else {}
    t_band = _f(win.get("lo_ps")) if win.get("found") else _beta_onset(obs, float(band[0]))
    if t_band is None:
        return None
    t_hi = t_band * 10 ** need_dec
    return n_blocks * t_hi / frac, f"diffusive window from {t_band:.3g} ps needs lags to {t_hi:.3g} ps"


_COLLECTIVE = re.compile(r"charge-MSD beta ([0-9.eE+-]+|nan) over .*accepted \(([0-9.eE+-]+), ([0-9.eE+-]+)\)")
_LAG_FRACTIONS = re.compile(r"lags \[([0-9.eE+-]+), ([0-9.eE+-]+)\] x block length")


def half_width_exponent(name: str) -> float:
    """γ in hw(T′) = hw(T)·(T/T′)^γ for the result ``name`` under the registered estimators: ½ (block
    variance ∝ 1/length), 0 for the results fitted over lags that grow with the block
    (:data:`LAG_FRACTION_PREFIXES`).

    >>> half_width_exponent("conductivity/sigma_NE"), half_width_exponent("self_diffusion/Li")
    (0.0, 0.5)
    """
    return 0.0 if str(name).startswith(LAG_FRACTION_PREFIXES) else 0.5


def collective_onset_length(doc: dict[str, Any], beta_lo: float, n_blocks: int) -> tuple[float, float, str] | None:
    """(T_C [ps], onset [ps], basis): the analysed length at which the collective-transport estimator's window
    (lags from f_lo × block length, read from the case's ``onsager.window.rule``) starts past the latest lag
    at which an ion's MSD exponent reaches ``beta_lo`` (:func:`_beta_onset`, from the ion's self-diffusion
    window): T_C = n onset / f_lo. None when the rule, an ion's window or a rising exponent is missing.

    The charge MSD of an electrolyte, and the ions' self MSDs over the same lags, turn diffusive no earlier
    than the ions' own MSDs do. A log-linear extrapolation, as for the diffusive window (range: a factor 3).
    """
    f = _LAG_FRACTIONS.search(str(_dict(_dict(doc.get("onsager")).get("window")).get("rule") or ""))
    ions = [sp for sp, z in _dict(_dict(doc.get("system")).get("charges_e")).items() if _f(z)]
    if f is None or not ions or _f(f.group(1)) is None or not float(f.group(1)) > 0:
        return None
    onsets = [_beta_onset(_dict(_dict(doc.get("observables")).get(D_PREFIX + sp)), beta_lo) for sp in ions]
    if any(t is None for t in onsets):
        return None
    onset = max(onsets)
    return (n_blocks * onset / float(f.group(1)), onset,
            f"the ions' MSD beta reaches {beta_lo:g} at {onset:.3g} ps; the registered window starts at "
            f"{f.group(1)} x block length")


def collective_length(doc: dict[str, Any], detail: str, n_blocks: int) -> tuple[float, str] | None:
    """(T_C [ps], basis): the analysed length at which the collective-regime check (the charge MSD's β over
    the registered lags [f_lo, f_hi] x block length within its band) is projected to pass
    (:func:`collective_onset_length` at the band's lower edge stated in the check's ``detail``); None when not
    projectable.
    """
    m = _COLLECTIVE.search(detail or "")
    if m is None or _f(m.group(2)) is None:
        return None
    d = collective_onset_length(doc, float(m.group(2)), n_blocks)
    return None if d is None else (d[0], "collective regime: " + d[2])


def _lag_fraction_precision(doc: dict[str, Any] | None, settings: dict[str, Any], check: str, length: float,
                            n_blocks: int) -> tuple[float, float, float, str, str] | str:
    """The precision need of a result fitted over lags that grow with the block (module doc): (T_C, low,
    high, check, basis), or why it is not earned by extension (a str)."""
    band = settings.get("onsager_beta_range") or [0.8, 1.2]
    d = collective_onset_length(doc or {}, float(band[0]), n_blocks) if _f(band[0]) is not None else None
    if d is None:
        return (f"{check}: the relative half-width of a fit over lags that grow with the block does not fall with "
                "length, and the ions' MSD beta does not rise towards the band: not projectable")
    if d[0] <= length:
        return (f"{check}: the window is past the sub-diffusive lags ({d[2]}) and the relative half-width of a "
                "fit over lags that grow with the block does not fall with length: not earned by extension; "
                "more blocks or a registered fixed lag window (a method revision) would narrow it")
    return (d[0], d[0] / 3.0, d[0] * 3.0, check,
            f"{check}: relative half-width independent of length while the window's lags are sub-diffusive; "
            f"projected where they leave it: {d[2]}")


def project_result(obs: dict[str, Any], reason: str, settings: dict[str, Any], production_ns: float,
                   case_windows: dict[str, Any] | None = None, pooled: tuple[float, int] | None = None,
                   doc: dict[str, Any] | None = None, name: str = "") -> dict[str, Any]:
    """The projection of one SI result of results.json (its entry ``obs``, the recorded ``reason``, the
    case's ``windows``; ``pooled``: (half-width, degrees of freedom) to project the precision from instead
    of the result's own four-block half-width — D, :func:`pooled_half_width`; ``doc``: the case's results.json,
    for the collective regime of sigma, the ionicity and t+, :func:`collective_length`).

    Returns ``{"ns_to_C", "ns_to_C_low", "ns_to_C_high", "credible", "limiting_check", "basis", "rule"}``:
    the *total* production length [ns] projected to earn the result (None when not projectable).
    """
    out: dict[str, Any] = {"ns_to_C": None, "ns_to_C_low": None, "ns_to_C_high": None, "credible": False,
                           "limiting_check": None, "basis": "", "rule": PROJECTION_RULE}
    window = _window_ps(obs, case_windows or {})
    failing = _failing(obs, reason)
    if window is None or not failing:
        out["basis"] = "no analysed window or no failing sampling check named: not projectable"
        return out
    guard, length, n = window
    unc = obs.get("uncertainty") if isinstance(obs.get("uncertainty"), dict) else {}
    hw, value = _f(unc.get("half_width_95")), _f(obs.get("value"))
    lags_grow = half_width_exponent(name) == 0.0  # sigma, sigma_NE, ionicity, t+: the module doc
    need: list[tuple[float, float, float, str, str]] = []
    for check, detail in failing.items():
        spread = _SPREAD.search(detail)
        if check.endswith("block_precision") and hw is not None:
            bound = _bound(detail, value)
            if bound is None:
                return {**out, "limiting_check": check, "basis": f"{check}: registered bound not stated"}
            if lags_grow:
                lf = _lag_fraction_precision(doc, settings, check, length, n)
                if isinstance(lf, str):
                    return {**out, "limiting_check": check, "basis": lf, "half_width_95": hw}
                need.append(lf)
            elif pooled is not None:
                t_c, lo, hi = precision_length(length, pooled[0], bound, n, dof=pooled[1])
                need.append((t_c, lo, hi, check, f"{check}: hw {hw:.3g} (pooled over the case's D: "
                                                 f"{pooled[0]:.3g}, {pooled[1]} dof) -> bound {bound:.3g}"))
            else:
                t_c, lo, hi = precision_length(length, hw, bound, n)
                need.append((t_c, lo, hi, check, f"{check}: hw {hw:.3g} -> bound {bound:.3g}"))
        elif spread is not None and float(spread.group(2)) > 0:  # a spread of block-like estimates: as precision
            t_c, lo, hi = precision_length(length, float(spread.group(1)), float(spread.group(2)), n)
            need.append((t_c, lo, hi, check, f"{check}: spread {spread.group(1)} -> {spread.group(2)}"))
        elif check == "diffusive_window":
            d = _diffusive_length(obs, settings, n)
            if d is None:
                return {**out, "limiting_check": check, "basis": "diffusive window: beta does not rise towards the "
                                                                  "band within the lags: not projectable"}
            need.append((d[0], d[0] / 3.0, d[0] * 3.0, check, d[1]))  # a log-linear extrapolation: a factor 3
        elif check == "collective_regime" and doc is not None:
            d = collective_length(doc, detail, n)
            if d is None:
                return {**out, "limiting_check": check, "basis": "collective regime: the ions' MSD beta does not "
                                                                  "rise towards the band: not projectable"}
            need.append((d[0], d[0] / 3.0, d[0] * 3.0, check, d[1]))
        else:
            return {**out, "limiting_check": check, "basis": f"{check} cannot be projected from one segment"}
    tau, block_ps = correlation_time_ps(obs), length / n
    frac = block_variance_fraction(block_ps, tau)
    if frac < 1.0:  # the precision lengths as the blocks will scale once they outlast tau
        need = [(t / frac, lo / frac, hi / frac, c, b + f" (/ f(L/tau) = {frac:.3g}, tau {tau:.3g} ps)")
                if c.endswith("block_precision") and not lags_grow else (t, lo, hi, c, b)
                for t, lo, hi, c, b in need]
    t_c, lo, hi, check, basis = max(need)
    to_ns = 1e-3
    out.update(ns_to_C=max((guard + t_c) * to_ns, production_ns), ns_to_C_low=(guard + lo) * to_ns,
               ns_to_C_high=(guard + hi) * to_ns, credible=True, limiting_check=check,
               basis="; ".join(b for *_, b in need), block_length_ps=block_ps, correlation_time_ps=tau,
               half_width_95=hw)
    precision = any(c.endswith("block_precision") for c in failing)
    if precision and not lags_grow and blocks_outlast_correlation(block_ps, tau) is False:
        out.update(credible=False, basis=f"blocks of {block_ps:.3g} ps are shorter than "
                                         f"{MIN_BLOCK_CORRELATION_TIMES:g} correlation times (tau {tau:.3g} ps of the "
                                         "per-frame series): their variance does not yet fall as 1/length; "
                                         + out["basis"])
    return out


def half_width_snapshot(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Result name → ``{"half_width_95", "analysed_ps", "n_blocks"[, "correlation_time_ps"]}`` of every result of
    a case's results.json with a finite, positive half-width: what the next decision compares with
    (:func:`half_width_rose`), and the inputs the audit checks a decision's targets against (:func:`_fits`)."""
    out: dict[str, dict[str, float]] = {}
    windows = doc.get("windows") if isinstance(doc.get("windows"), dict) else {}
    for name, obs in _dict(doc.get("observables")).items():
        if not isinstance(obs, dict):
            continue
        hw, win = _f(_dict(obs.get("uncertainty")).get("half_width_95")), _window_ps(obs, windows)
        if hw is not None and hw > 0 and win is not None and win[1] > 0:
            out[str(name)] = {"half_width_95": hw, "analysed_ps": win[1], "n_blocks": win[2]}
            tau = correlation_time_ps(obs)
            if tau is not None:
                out[str(name)]["correlation_time_ps"] = tau
    return out


def half_width_rose(before: Any, after: Any, exponent: float = 0.5) -> float | None:
    """q = (hw′/hw)·(T′/T)^γ of one result between two decisions when it exceeds what two ``n``-block
    estimates allow under the (T/T′)^γ scaling (√F₀.₉₅(n−1, n−1): 3.05 for four blocks); None otherwise, or
    when the analysed window did not grow by a fifth (nothing to compare) or either side is unreadable.
    γ = ``exponent``: the result's :func:`half_width_exponent`.

    >>> round(half_width_rose({"half_width_95": 0.089, "analysed_ps": 276.0, "n_blocks": 4},
    ...                       {"half_width_95": 0.18, "analysed_ps": 1068.0, "n_blocks": 4}), 2)
    3.98
    """
    b, a = _dict(before), _dict(after)
    hw0, t0, hw1, t1 = (_f(x.get(k)) for x in (b, a) for k in ("half_width_95", "analysed_ps"))
    n = _f(a.get("n_blocks")) or 4.0
    if None in (hw0, t0, hw1, t1) or not (hw0 > 0 and t0 > 0 and t1 >= 1.2 * t0) or not 2 <= n <= 1000:
        return None
    q = hw1 / hw0 * (t1 / t0) ** exponent
    return q if q > math.sqrt(stats.f.ppf(0.95, n - 1, n - 1)) else None


def project_graph(graph: dict[str, Any], results: dict[str, dict[str, Any]], production_ns: dict[str, float],
                  *, budget_ns: dict[str, float], history: dict[str, dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """Put a projection on every SI observable node of ``graph`` (in place; returns the graph).

    Parameters
    ----------
    results : mapping
        Case → its results.json.
    production_ns : mapping
        Case → production length so far [ns].
    budget_ns : mapping
        Case → total production length the budget still allows [ns] (what is run plus what remains).
    history : mapping, optional
        Case → :func:`half_width_snapshot` its last decision recorded: a result whose half-width rose since
        (:func:`half_width_rose`) is not credibly projected.
    """
    nodes = graph["nodes"]
    derived: dict[str, list[str]] = {}
    for e in graph["edges"]:
        if e["from"].startswith("observable:") and e["to"].startswith("observable:"):
            derived.setdefault(e["from"], []).append(e["to"])
    for nid in topological_order(graph):
        node = nodes[nid]
        if node["kind"] != "observable" or node["state"] != "SI":
            continue
        case = node["case"]
        doc = results.get(case) or {}
        obs = (doc.get("observables") or {}).get(node["name"]) or {}
        proj = project_result(obs, node["own_reason"], doc.get("settings") or {}, production_ns.get(case, 0.0),
                              doc.get("windows") if isinstance(doc.get("windows"), dict) else {},
                              pooled=pooled_half_width(doc, node["name"]), doc=doc, name=node["name"])
        if node["own_state"] != "SI" or node["own_reason"].startswith("input "):  # SI only through an input (rule 8)
            proj = {**proj, "ns_to_C": production_ns.get(case, 0.0), "credible": True, "basis": "own checks pass"}
        before = _dict(_dict((history or {}).get(case)).get(node["name"]))
        gamma = half_width_exponent(node["name"])
        q = half_width_rose(before, _dict(half_width_snapshot(
            {"observables": {node["name"]: obs}, "windows": doc.get("windows")}).get(node["name"])), gamma)
        if q is not None:
            proj = {**proj, "credible": False, "half_width_rose": q,
                    "basis": f"half-width {before['half_width_95']:.3g} -> "
                             f"{_dict(obs.get('uncertainty')).get('half_width_95'):.3g} since the last decision: "
                             f"{q:.2f}x the (T/T')^{gamma:g} expectation, beyond two 4-block estimates' spread: blocks "
                             f"shorter than the result's slowest relaxation; " + str(proj.get("basis"))}
        for src in derived.get(nid, ()):
            p = nodes[src].get("projection") or {}
            if nodes[src]["state"] == "SI":
                if not p.get("credible"):
                    proj = {**proj, "credible": False, "ns_to_C": None, "limiting_check": f"input:{src}",
                            "basis": f"input {src} is not projectable"}
                elif proj.get("credible") and (p.get("ns_to_C") or 0) > (proj.get("ns_to_C") or 0):
                    proj = {**proj, **{k: p[k] for k in ("ns_to_C", "ns_to_C_low", "ns_to_C_high")},
                            "limiting_check": f"input:{src}", "basis": f"needs its input {src}: {p.get('basis')}"}
        total = proj.get("ns_to_C")
        proj["reachable_in_budget"] = None if total is None else bool(total <= budget_ns.get(case, 0.0) + 1e-9)
        node["projection"] = proj
    return graph


#: The extend-or-stop rule (recorded with every decision).
DECISION_RULE = (
    "per case: extend production by one segment when some required SI result (not F, M, not_estimable or "
    "invalid) has a credible projection that is earned within the remaining budget (per case and in all); "
    "the segment reaches the nearest such projection (at least half the production so far, at most the "
    "budget left); otherwise stop, naming the results out of reach with their projected cost and those "
    "that cannot be projected. Never extend for an F or M result: those need a method fix or a delivery."
)


def decide(graph: dict[str, Any], case: str, *, production_ns: float, remaining_ns: float,
           required: set[str] | None = None) -> dict[str, Any]:
    """The extend-or-stop decision of one case from its projected graph (:data:`DECISION_RULE`).

    Parameters
    ----------
    graph : dict
        Propagated graph with projections (:func:`project_graph`).
    case : str
        The case.
    production_ns : float
        Production so far [ns].
    remaining_ns : float
        What the budget still allows this case [ns] (the smaller of the case's and the study's remainders).
    required : set of str, optional
        Observable families whose results are required (default: every SI result counts).

    Returns
    -------
    dict
        ``{"case", "action": "extend"|"stop", "segment_ns", "target_ns", "targets", "out_of_reach",
        "not_projectable", "never_extended", "reason", "rule"}``.
    """
    targets, out_of_reach, unknown, never = [], [], [], []
    for n in sorted(graph["nodes"].values(), key=lambda n: n["id"]):
        if n["kind"] != "observable" or n["case"] != case:
            continue
        if required is not None and n["name"].split("/")[0] not in required:
            continue
        if n["state"] in ("F", "M"):
            never.append({"node": n["id"], "state": n["state"]})
            continue
        if n["state"] != "SI":
            continue
        p = n.get("projection") or {}
        if not p.get("credible") or p.get("ns_to_C") is None:
            unknown.append({"node": n["id"], "why": p.get("basis", "no projection")})
        elif p["ns_to_C"] <= production_ns + remaining_ns + 1e-9:
            targets.append({"node": n["id"], "ns_to_C": p["ns_to_C"], "state": n["state"],
                            "credible": bool(p.get("credible")),
                            **{k: p[k] for k in ("block_length_ps", "correlation_time_ps", "half_width_95")
                               if p.get(k) is not None}})
        else:
            out_of_reach.append({"node": n["id"], "ns_to_C": p["ns_to_C"]})
    out = {"case": case, "action": "stop", "segment_ns": 0.0, "target_ns": production_ns, "targets": targets,
           "out_of_reach": out_of_reach, "not_projectable": unknown, "never_extended": never,
           "production_ns": production_ns, "remaining_ns": remaining_ns, "rule": DECISION_RULE}
    if targets and remaining_ns > 1e-9:
        nearest = min(t["ns_to_C"] for t in targets)
        segment = min(remaining_ns, max(nearest - production_ns, 0.5 * production_ns))
        out.update(action="extend", segment_ns=segment, target_ns=production_ns + segment,
                   reason=f"{len(targets)} SI result(s) projected earned within the budget; the nearest at "
                          f"{nearest:.3g} ns: extend by {segment:.3g} ns to {production_ns + segment:.3g} ns")
        return out
    worst = sorted(out_of_reach, key=lambda t: t["ns_to_C"])[:3]
    out["reason"] = ("stop: no required SI result is projected earned within the budget "
                     f"({production_ns:.3g} ns run, {remaining_ns:.3g} ns left); out of reach: "
                     + (", ".join(f"{t['node']} ~{t['ns_to_C']:.3g} ns" for t in worst) or "none")
                     + f"; not projectable: {len(unknown)}; F/M (never extended): {len(never)}")
    return out


def cheapest_first(graph: dict[str, Any], cases: list[str], *, production_ns: dict[str, float],
                   remaining_ns: dict[str, float], required: set[str] | None = None) -> list[str]:
    """``cases`` in the order a round of the study decides them: the case whose nearest credible target needs
    the fewest ns of extension first, cases with nothing to extend for last (order kept among equals).

    Within one study budget the cases compete: deciding in a fixed order gives the first case every ns it can
    use. Cheapest first earns the most results per ns spent (each decision still follows :func:`decide`).
    """
    def cost(case: str) -> float:
        d = decide(graph, case, production_ns=production_ns.get(case, 0.0), remaining_ns=remaining_ns.get(case, 0.0),
                   required=required)
        return d["segment_ns"] if d["action"] == "extend" else math.inf

    return sorted(cases, key=cost)


def judge_production_decisions(events: list[dict[str, Any]], graph: dict[str, Any] | None) -> dict[str, Any]:
    """O3 (action / stopping) for a run with a state graph: were production extensions spent on SI results
    projected reachable, and was each stop justified?

    A pure function of the run's events (as parsed, in order) and its recorded graph (working form,
    :func:`mdbench.record.state_graph.from_json`; None when the run has none) — the audit reads both with its
    own safe reader. Findings (each ``{"code", "case", "message", "event_id"}``):

    * ``extension_without_decision``: a production extension with no ``extend`` decision before it;
    * ``extension_on_unearnable``: an ``extend`` decision whose targets include a result that is not SI (F, M,
      not_estimable …), not credibly projected (by its flag; by its recorded block length and correlation
      time, :func:`blocks_outlast_correlation`; or by a half-width that rose since the case's previous
      decision, :func:`half_width_rose` on the decisions' ``half_widths`` — the rules the study decides by),
      or projected beyond the budget;
    * ``extension_after_unreachable``: an ``extend`` decision all of whose targets an earlier decision of the
      case had found out of reach, with no new production in between;
    * ``unjustified_stop``: a ``stop`` decision although one of its results was projected earned within the
      remaining budget;
    * ``decision_without_inputs``: an ``extend`` decision that does not record its inputs — no ``half_widths``
      snapshot of its case's results, or a target with neither its own half-width nor an entry in it — so the
      rules above cannot be checked against what it knew.

    Returns ``{"has_graph": bool, "n_decisions", "findings": [...]}``; a run without a graph gets
    ``has_graph`` False and no findings (the audit judges it as before).
    """
    if graph is None:
        return {"has_graph": False, "n_decisions": 0, "findings": []}
    events = [e for e in events if isinstance(e, dict)]
    decisions = [e for e in events if e.get("type") == "production_decision" and isinstance(e.get("payload"), dict)]
    findings: list[dict[str, Any]] = []
    last_extend: dict[str, int] = {}
    unreachable: dict[str, set[str]] = {}
    snapshot: dict[str, dict[str, Any]] = {}  # case → the half-widths its last decision recorded
    for e in events:
        p = e.get("payload") if isinstance(e.get("payload"), dict) else {}
        case = p.get("case")
        if e.get("type") == "production_extension":
            if case not in last_extend:
                findings.append({"code": "extension_without_decision", "case": case, "event_id": e.get("id"),
                                 "message": f"{case}: production extended (event {e.get('id')}) without an extend "
                                            "decision before it"})
            last_extend.pop(case, None)
            unreachable.pop(case, None)
            continue
        if e.get("type") != "production_decision":
            continue
        now, before = _dict(p.get("half_widths")), snapshot.get(case, {}) if isinstance(case, str) else {}
        if isinstance(case, str) and now:
            snapshot[case] = now
        if p.get("action") == "extend":
            last_extend[case] = e["id"]
            targets = {str(t.get("node")) for t in _rows(p.get("targets"))}
            blind = [t for t in _rows(p.get("targets"))
                     if _f(t.get("half_width_95")) is None and not _dict(now.get(_result_name(t)))]
            if not now or blind:
                findings.append({"code": "decision_without_inputs", "case": case, "event_id": e["id"],
                                 "message": f"{case}: extend decision (event {e['id']}) without "
                                            + ("its results' half-widths" if not now else
                                               "the inputs of " + ", ".join(str(t.get("node")) for t in blind))
                                            + ": its projection cannot be checked"})
            bad = [t for t in _rows(p.get("targets")) if not _fits(t, p, now.get(_result_name(t)))
                   or half_width_rose(before.get(_result_name(t)), now.get(_result_name(t)),
                                      half_width_exponent(_result_name(t))) is not None]
            if bad:
                findings.append({"code": "extension_on_unearnable", "case": case, "event_id": e["id"],
                                 "message": f"{case}: extension for {', '.join(str(t.get('node')) for t in bad)}, "
                                            "not projected earned within the budget"})
            if targets and targets <= unreachable.get(case, set()):
                findings.append({"code": "extension_after_unreachable", "case": case, "event_id": e["id"],
                                 "message": f"{case}: extended for results an earlier decision found out of reach"})
        else:
            reachable = [t for t in _rows(p.get("targets")) if _fits(t, p, now.get(_result_name(t)))]
            if reachable and (_f(p.get("remaining_ns")) or 0.0) > 1e-9:
                findings.append({"code": "unjustified_stop", "case": case, "event_id": e["id"],
                                 "message": f"{case}: stopped although {len(reachable)} result(s) were projected "
                                            "earned within the budget"})
            unreachable.setdefault(case, set()).update(str(t.get("node")) for t in _rows(p.get("out_of_reach")))
    return {"has_graph": True, "n_decisions": len(decisions), "findings": findings}


def _result_name(target: dict[str, Any]) -> str:
    """``observable:CASE/NAME`` → ``NAME``."""
    return str(target.get("node") or "").split(":", 1)[-1].partition("/")[2]


def _rows(x: Any) -> list[dict[str, Any]]:
    return [t for t in x if isinstance(t, dict)] if isinstance(x, list) else []


def _fits(target: dict[str, Any], decision: dict[str, Any], recorded: Any = None) -> bool:
    """A decision's target projected earned within what that decision had left (``recorded``: the target's entry
    in the decision's ``half_widths``, whose block length and correlation time count where the target omits
    its own)."""
    ns = _f(target.get("ns_to_C"))
    if target.get("state", "SI") != "SI" or target.get("credible") is False or ns is None:
        return False
    snap = _dict(recorded)
    analysed, n = _f(snap.get("analysed_ps")), _f(snap.get("n_blocks"))
    block = _f(target.get("block_length_ps"))
    if block is None and analysed is not None and n:
        block = analysed / n
    tau = _f(target.get("correlation_time_ps"))
    if tau is None:
        tau = _f(snap.get("correlation_time_ps"))
    if half_width_exponent(_result_name(target)) == 0.5 and blocks_outlast_correlation(block, tau) is False:
        return False  # the decision's own inputs say its blocks were shorter than the correlation time
    return ns <= (_f(decision.get("production_ns")) or 0.0) + (_f(decision.get("remaining_ns")) or 0.0) + 1e-9
