"""THE registry of observables: the one list that analysis, audit, report and templates read.

Each :class:`Observable` names a family of results (``self_diffusion`` → ``self_diffusion/LI``,
``self_diffusion/FSI``, …): its ``category`` in results.json, the seed's audit group it belongs to, its
unit, whether and with which targets the seed requires it per case, the estimator that computes it, the
registration kind whose definition it uses, its figure, its template, and how it is drawn in the block
bars. The pipeline runs the estimators in :data:`REGISTRY` order (later ones may use what earlier ones
share: the RDF's cutoffs, the MSDs of self-diffusion); ``results.py`` groups and tables states with it;
the audit maps a run's results onto the seed's groups with it and reports anything it does not know; the
study runs :func:`analysis_templates`.

:class:`AuditGroup` holds what the audit needs per seed group (seed 000, Tables 2 and A3): the names an
agent may use for it, the words that show its definition was registered, and which item rules apply.

Adding an observable takes three files: an estimator module (a class following
:class:`mdbench.analysis.estimator.Estimator`), one entry here, and one template.

This module imports nothing heavy: the audit reads it without loading the estimators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

#: Key of :attr:`Observable.targets` that applies to every case without its own entry.
ANY_CASE = "*"
#: Figure of results.json that draws the block bars (:func:`block_bar_names`).
BLOCK_BARS_FIGURE = "blocks"


@dataclass(frozen=True)
class AuditGroup:
    """One required analysis of seed 000 (Table 2) as the audit assesses it (Table A3).

    Attributes
    ----------
    name : str
        Group name used in audits, run-record summaries and reports (``coordination``).
    title : str
        Words of the seed's table (``RDF and coordination``).
    aliases : str
        Regular expression of the result names an agent may use for the group (matched at the start of a
        key, lower case): how results without a registry ``category`` are recognised.
    categories : tuple of str
        ``category`` spellings of other tools that mean this group (the registry's own categories are
        added by :func:`category_group`).
    definition_words : tuple of str
        Words of a registration (its kind or definition keys) that show the definition was registered (A2);
        empty: the group needs no registered definition (a mean of an energy term).
    regime : bool
        The estimator needs a regime / plateau diagnostic (A5) and its transport state is checked against
        the production files (A4: volume, temperature).
    canonical_r5 : bool
        Stable structural quantity compared with the canonical reanalysis by the R5 rule.
    treatment : str
        What A4 looks for: ``"energy"`` (an edr time series; nothing to declare), ``"trajectory"`` (PBC,
        unwrapping, frame) or ``"pressure_tensor"`` (ensemble, volume of the pressure window).
    definition_check : str or None
        Definition-level check (A2): ``"transference_convention"`` (t+ reproduced only by a mixed-up
        formula), ``"cross_correlations"`` (a conductivity without ionic cross-correlations) or None.
    excluded_tokens : frozenset of str
        Result-name tokens that mark a related number that is *not* this group's target (σ_NE, ionicity).
    centre_tokens : frozenset of str
        Tokens naming the centre that a target may leave out (``li_o_fsi`` matches ``FSI:O``).
    cutoff_defined : bool
        Its results depend on a declared cutoff: the canonical value compared is the one at the same cutoff.
    target_by_key : bool
        Targets are matched by the last key of a result's path (``density``), not by its tokens; results
        whose own key is such a target belong to the group even without a matching group name.
    target_aliases : mapping
        Other spellings of targets (``epot`` → ``potential_energy``).
    fluctuates_about_zero : tuple of str
        Targets whose relative block half-width means nothing (pressure).
    repeat_panel : (str, str) or None
        Report panel of repeat consistency (seed Fig. 5): label and the target pattern it plots.
    precision_thresholds : (str or None, str or None)
        Names of the registered block-precision thresholds (:class:`mdbench.analysis.settings.AnalysisSettings`
        fields, ``analysis_adequacy_and_stopping`` → ``thresholds``): the relative 95 % half-width limit and the
        absolute half-width accepted whatever the relative one; the audit's backstop for results that report
        no sampling checks of their own. (None, None): the group has no registered precision threshold.
    """

    name: str
    title: str
    aliases: str
    categories: tuple[str, ...] = ()
    definition_words: tuple[str, ...] = ()
    regime: bool = False
    canonical_r5: bool = False
    treatment: str = "trajectory"
    definition_check: str | None = None
    excluded_tokens: frozenset[str] = frozenset()
    centre_tokens: frozenset[str] = frozenset()
    cutoff_defined: bool = False
    target_by_key: bool = False
    target_aliases: Mapping[str, str] = field(default_factory=dict)
    fluctuates_about_zero: tuple[str, ...] = ()
    repeat_panel: tuple[str, str] | None = None
    precision_thresholds: tuple[str | None, str | None] = (None, None)

    @property
    def pattern(self) -> re.Pattern[str]:
        """:attr:`aliases` compiled."""
        return _compiled(self.aliases)


@dataclass(frozen=True)
class Member:
    """One kind of result of a family as the report's cross-system table shows it.

    Attributes
    ----------
    pattern : str
        Regular expression searched in a result's qualifier (``LI`` of ``self_diffusion/LI``); for a
        ``fixed`` member, the qualifier itself (``sigma``; empty: the family name).
    label : str
        Row label; ``{q}`` is the qualifier without ``strip``.
    fixed : bool
        The row is shown in every comparison (a state ``–`` where a case lacks it), after the found ones.
    strip : str
        Suffix removed from the qualifier in the label (``@first_min``).
    """

    pattern: str
    label: str
    fixed: bool = False
    strip: str = ""

    def matches(self, qualifier: str) -> bool:
        """True when a found result with this qualifier is shown by this member."""
        return not self.fixed and re.search(self.pattern, qualifier) is not None

    def row_label(self, qualifier: str) -> str:
        """The label of one row."""
        return self.label.replace("{q}", qualifier.removesuffix(self.strip) if self.strip else qualifier)


@dataclass(frozen=True)
class Observable:
    """One registered observable family.

    Attributes
    ----------
    name : str
        Family name; results are named ``name`` or ``name/<qualifier>/…`` (:meth:`key`).
    category : str
        ``category`` of its entries in results.json.
    audit_group : str
        Name of the :class:`AuditGroup` it belongs to.
    unit : str
        Unit of its values (``"per term"`` when each member has its own).
    title : str
        What it is, in a chemist's words.
    required : bool
        The seed requires it for every case (seed 000, Table 2).
    targets : mapping of str to tuple of str
        Case (``"*"``: any other case) → the specific targets the audit looks for (species, channels).
    placeholders : tuple of str
        Members recorded, with the upstream state, when a case cannot be analysed (empty: the family name).
    estimator : str
        ``module:Class`` of its estimator (:class:`mdbench.analysis.estimator.Estimator`).
    registration : str
        Registration kind whose definition it uses (:func:`mdbench.analysis.definitions.registration_definitions`).
    figure : str or None
        Figure of results.json ``figures`` that shows it.
    template : str
        Analysis template (executor stage name) that presents it.
    block_bars : str or None
        Regular expression of its result names drawn in the block-bar figure.
    details_section : str or None
        Top-level section of results.json that holds its estimator's details.
    null_means_none : bool
        A null value (or block value) means "none by the registered rule" (no first minimum in a g(r)),
        not a non-finite number; such a result can be accepted (C) without a value.
    members : tuple of Member
        Its rows of the report's cross-system comparison.
    evidence : str or None
        Caption of :attr:`figure` among the report's evidence figures (None: not an evidence figure).
    report_rank : int
        Order of its rows and evidence figure in the report (lower first).
    precision : (str or None, str or None) or None
        Its own registered block-precision thresholds (relative, absolute: ``AnalysisSettings`` field names),
        where they differ from its audit group's (:attr:`AuditGroup.precision_thresholds`): the audit's
        backstop for its results that report no sampling checks of their own.
    products : tuple of str
        What its estimator shares with later estimators (:attr:`mdbench.analysis.estimator.Estimate.products`);
        an estimator that reads ``products.<name>`` runs after the entry declaring ``<name>``
        (:func:`mdbench.analysis.estimator.estimator_plan`), and one that reads a product it did not declare
        is refused.
    """

    name: str
    category: str
    audit_group: str
    unit: str
    title: str
    estimator: str
    registration: str
    template: str
    required: bool = False
    targets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    placeholders: tuple[str, ...] = ()
    figure: str | None = None
    block_bars: str | None = None
    details_section: str | None = None
    null_means_none: bool = False
    products: tuple[str, ...] = ()
    members: tuple[Member, ...] = ()
    evidence: str | None = None
    report_rank: int = 50
    precision: tuple[str | None, str | None] | None = None

    def key(self, *qualifiers: str) -> str:
        """The result name of one member: ``key("LI")`` → ``self_diffusion/LI``."""
        return "/".join((self.name, *qualifiers))

    def owns(self, name: str) -> bool:
        """True when ``name`` is this family or one of its members."""
        return name == self.name or name.startswith(self.name + "/")

    def targets_for(self, case: str) -> tuple[str, ...]:
        """The audit targets of ``case`` (its own entry, else the any-case entry, else none)."""
        return tuple(self.targets.get(case.upper(), self.targets.get(ANY_CASE, ())))

    def unanalysable_names(self) -> tuple[str, ...]:
        """Names recorded with the upstream state when nothing could be computed."""
        return tuple(self.key(p) for p in self.placeholders) if self.placeholders else (self.name,)


# ------------------------------------------------------------------------------------------- audit groups
THERMODYNAMICS_GROUP = AuditGroup(
    "thermodynamics", "Thermodynamics", r"^(thermo|thermodynamics)$", categories=("thermo",),
    canonical_r5=True, treatment="energy", target_by_key=True,
    target_aliases={"potential": "potential_energy", "epot": "potential_energy", "etot": "total_energy",
                    "total": "total_energy"},
    fluctuates_about_zero=("pressure",), repeat_panel=("density [kg/m^3]", r"density"))
COORDINATION_GROUP = AuditGroup(
    "coordination", "RDF and coordination", r"^(cn|coordination|rdf|rdf_cn|structure)",
    categories=("coordination",),
    definition_words=("rdf", "coordination", "cutoff", "selection", "contact", "minimum"), canonical_r5=True,
    centre_tokens=frozenset({"li", "na"}), cutoff_defined=True, repeat_panel=("coordination number", r"."),
    precision_thresholds=("cn_max_rel_half_width", "cn_abs_half_width_ok"))
ASSOCIATION_GROUP = AuditGroup(
    "association", "Ion association", r"^(association|ion_association|cip|agg|ion_pairs?|clusters?)",
    definition_words=("contact", "cluster", "association", "aggregate", "cutoff"), canonical_r5=True,
    repeat_panel=("aggregates (AGG fraction)", r"agg"),
    precision_thresholds=(None, "association_fraction_max_half_width"))
SELF_DIFFUSION_GROUP = AuditGroup(
    "self_diffusion", "Self-diffusion", r"^(self_diffusion|diffusion|d)($|_)", categories=("diffusion",),
    definition_words=("diffusion", "fit", "window", "msd"), regime=True,
    repeat_panel=("self-diffusion D [m^2/s]", r"."), precision_thresholds=("diffusion_max_rel_half_width", None))
VISCOSITY_GROUP = AuditGroup(
    "viscosity", "Viscosity", r"^(viscosity|eta)($|_)",
    definition_words=("viscosity", "green", "kubo", "plateau", "helfand"), regime=True,
    treatment="pressure_tensor", precision_thresholds=("viscosity_max_rel_half_width", None))
CONDUCTIVITY_GROUP = AuditGroup(
    "conductivity", "Collective conductivity", r"^(conductivity|sigma)($|_)",
    definition_words=("conductivity", "onsager", "einstein", "frame"), regime=True,
    definition_check="cross_correlations",
    excluded_tokens=frozenset({"ne", "nernst", "nernst_einstein", "ionicity"}),
    precision_thresholds=("sigma_t_plus_max_rel_half_width", None))
TRANSFERENCE_GROUP = AuditGroup(
    "transference_number", "Correlated transference",
    r"^(transference|transference_number|t_plus|tplus|t\+)($|_)", categories=("transference_number",),
    definition_words=("transference", "convention", "frame", "onsager"), regime=True,
    definition_check="transference_convention",
    precision_thresholds=(None, "t_plus_max_abs_half_width"))  # t+ may sit near 0: an absolute bound

#: The seed's required analyses, in the order of its Table 2.
AUDIT_GROUPS: tuple[AuditGroup, ...] = (THERMODYNAMICS_GROUP, COORDINATION_GROUP, ASSOCIATION_GROUP,
                                        SELF_DIFFUSION_GROUP, VISCOSITY_GROUP, CONDUCTIVITY_GROUP,
                                        TRANSFERENCE_GROUP)

# -------------------------------------------------------------------------------------------- observables
_STAGE = "analysis/"
#: Members of the conductivity family: σ with cross-correlations, the Nernst–Einstein σ_NE (a related
#: number, not the required σ) and the ionicity σ/σ_NE; the t+ the report compares across systems.
_SIGMA, _SIGMA_NE, _IONICITY = "sigma", "sigma_NE", "ionicity"
_T_PLUS_SHOWN = "barycentric/unweighted_L"
_THERMO_MEMBERS = ("density", "temperature", "pressure", "potential_energy", "total_energy", "volume")
THERMO = Observable(
    "thermo", "thermodynamics", "thermodynamics", "per term (GROMACS units)",
    "density, temperature, pressure, potential and total energy, volume: whole-window and block means",
    "mdbench.analysis.thermo:ThermoEstimator", "analysis_guard_and_blocks", _STAGE + "50_thermo",
    required=True,
    targets={ANY_CASE: _THERMO_MEMBERS}, placeholders=_THERMO_MEMBERS,
    figure=BLOCK_BARS_FIGURE, block_bars=r"^thermo/density", products=("temperature_K", "energy_coverage"),
    evidence="block values with the whole-interval 95 % interval", report_rank=90)
RDF = Observable(
    "rdf", "rdf", "coordination", "nm", "first minimum of each species-resolved g(r) around the cations",
    "mdbench.analysis.rdf:RdfEstimator", "analysis_rdf_coordination", _STAGE + "51_structure",
    required=True, figure="rdf", details_section="structure", null_means_none=True,
    products=("rdf_results", "cutoffs", "cutoff_rules"), report_rank=0,
    evidence="RDF g(r) of each Li-site channel with the registered first minimum (coordination cutoff)")
COORDINATION = Observable(
    "coordination", "structure", "coordination", "molecules per centre",
    "distinct partner molecules in the first shell (first minimum and fixed cutoff), per site channel",
    "mdbench.analysis.coordination:CoordinationEstimator", "analysis_rdf_coordination", _STAGE + "51_structure",
    required=True,
    targets={"DE": ("li_o_dmc_carbonyl", "li_o_fsi"), "HCE": ("li_o_dmc_carbonyl", "li_o_fsi"),
             "LHCE": ("li_o_dmc_carbonyl", "li_o_fsi", "li_o_tte_ether")},
    figure="rdf", block_bars=r"@first_min", details_section="structure", report_rank=0,
    members=(Member(r"@first_min$", "Li+ CN {q} (first minimum) [molecules]", strip="@first_min"),))
ASSOCIATION = Observable(
    "association", "association", "association", "fraction of anions",
    "free/SSIP, CIP and AGG fractions per anion and the largest cluster",
    "mdbench.analysis.association:AssociationEstimator", "analysis_contacts_clusters",
    _STAGE + "52_association", required=True, targets={ANY_CASE: ("cip", "agg")}, figure="clusters",
    block_bars=r"/CIP$", details_section="association", products=("contacts",), report_rank=1,
    members=(Member(r"^(?!.*largest_cluster_fraction$)", "{q} fraction of anions"),),
    evidence="cation-anion cluster sizes (CIP/SSIP/AGG)")
SELF_DIFFUSION = Observable(
    "self_diffusion", "self_diffusion", "self_diffusion", "m^2/s", "self-diffusion coefficient D of each species",
    "mdbench.analysis.diffusion:SelfDiffusionEstimator", "analysis_fitting_rules", _STAGE + "53_diffusion",
    required=True,
    targets={"DE": ("li", "fsi", "dmc"), "HCE": ("li", "fsi", "dmc"), "LHCE": ("li", "fsi", "dmc", "tte")},
    figure="msd", block_bars=r"^self_diffusion/", products=("diffusion",), report_rank=2,
    members=(Member(r"", "D {q} (PBC) [m^2/s]"),),
    evidence="MSD per species with the local exponent beta and the fit window (self-diffusion)")
CONDUCTIVITY = Observable(
    "conductivity", "conductivity", "conductivity", "S/m",
    "ionic conductivity with cross-correlations (sigma), Nernst-Einstein sigma_NE and ionicity",
    "mdbench.analysis.onsager:CollectiveTransportEstimator", "analysis_fitting_rules",
    _STAGE + "55_conductivity", required=True, placeholders=("sigma",), figure=BLOCK_BARS_FIGURE,
    block_bars=r"^conductivity/sigma", details_section="onsager", report_rank=11,
    members=(Member(_SIGMA, "sigma (with cross-correlations) [S/m]", fixed=True),
             Member(_SIGMA_NE, "sigma_NE (Nernst-Einstein, labelled; no correlations) [S/m]", fixed=True),
             Member(_IONICITY, "ionicity sigma/sigma_NE", fixed=True)))
TRANSFERENCE = Observable(
    "transference", "transference", "transference_number", "1",
    "cation transference number t+ under both conventions, barycentric and solvent frame",
    "mdbench.analysis.onsager:CollectiveTransportEstimator", "analysis_fitting_rules",
    _STAGE + "55_conductivity", required=True, figure=BLOCK_BARS_FIGURE, details_section="onsager", report_rank=12,
    members=(Member(_T_PLUS_SHOWN, "t+ (barycentric frame, sum_j z+ z_j L+j / sum_ij z_i z_j L_ij)",
                    fixed=True),))
VISCOSITY = Observable(
    "viscosity", "viscosity", "viscosity", "mPa s", "shear viscosity (Green-Kubo, five traceless components)",
    "mdbench.analysis.viscosity:ViscosityEstimator", "analysis_fitting_rules", _STAGE + "54_viscosity",
    required=True, figure="viscosity_gk", block_bars=r"^viscosity$", products=("viscosity",), report_rank=10,
    members=(Member("", "eta (Green-Kubo) [mPa s]", fixed=True),),
    evidence="Green-Kubo running integral with its plateau window (viscosity)")
SELF_DIFFUSION_YH = Observable(
    "self_diffusion_yeh_hummer", "self_diffusion_yeh_hummer", "self_diffusion", "m^2/s",
    "finite-size corrected D of each species (Yeh-Hummer, the case's own eta and box length): an additional "
    "labelled result beside the uncorrected D",
    "mdbench.analysis.diffusion:YehHummerEstimator", "analysis_fitting_rules", _STAGE + "53_diffusion",
    figure="msd", report_rank=3, members=(Member(r"", "D {q} (Yeh-Hummer corrected) [m^2/s]"),))
RESIDENCE_TIME = Observable(
    "residence_time", "residence_time", "coordination", "ps",
    "Li+ residence time of each Li-O channel's first-shell partners (intermittent and continuous)",
    "mdbench.analysis.residence:ResidenceTimeEstimator", "analysis_shell_dynamics",
    _STAGE + "56_shell_dynamics", figure="shell_dynamics", report_rank=5,
    precision=("lifetime_max_rel_half_width", None),
    members=(Member(r"", "Li+ residence time {q} [ps]"),),
    evidence="intermittent and continuous shell correlation functions (residence times, contact lifetimes)")
CONTACT_LIFETIME = Observable(
    "contact_lifetime", "contact_lifetime", "association", "ps",
    "lifetime of cation-anion contacts of the registered contact definition (intermittent and continuous)",
    "mdbench.analysis.residence:ContactLifetimeEstimator", "analysis_shell_dynamics",
    _STAGE + "56_shell_dynamics", figure="shell_dynamics", report_rank=6,
    precision=("lifetime_max_rel_half_width", None),
    members=(Member(r"", "contact lifetime {q} [ps]"),))
SPECIATION = Observable(
    "speciation", "speciation", "coordination", "fraction of cations",
    "Li+ first-shell composition: fractions of the most frequent (n_FSI, n_DMC, n_TTE, ...) species",
    "mdbench.analysis.speciation:SpeciationEstimator", "analysis_speciation", _STAGE + "51_structure",
    figure="speciation", report_rank=1, precision=(None, "association_fraction_max_half_width"),
    members=(Member(r"", "Li+ first shell {q} (fraction of cations)"),),
    evidence="Li+ first-shell species (speciation) with their block 95 % intervals")

#: Result names of the conductivity members (read by the audit, the refits and the scripted defects).
SIGMA, SIGMA_NE, IONICITY = CONDUCTIVITY.key(_SIGMA), CONDUCTIVITY.key(_SIGMA_NE), CONDUCTIVITY.key(_IONICITY)
#: Qualifier → attribute of :class:`mdbench.analysis.onsager.OnsagerResult` holding that conductivity member.
CONDUCTIVITY_MEMBERS = {_SIGMA: "sigma", _SIGMA_NE: "sigma_NE", _IONICITY: "ionicity"}

#: Every observable. The pipeline runs their estimators in the order their declared inputs and products
#: require (:func:`mdbench.analysis.estimator.estimator_plan`), this order where nothing requires another.
REGISTRY: tuple[Observable, ...] = (THERMO, RDF, COORDINATION, ASSOCIATION, SELF_DIFFUSION, CONDUCTIVITY,
                                    TRANSFERENCE, VISCOSITY, SELF_DIFFUSION_YH, RESIDENCE_TIME, CONTACT_LIFETIME,
                                    SPECIATION)


# --------------------------------------------------------------------------------------------- look-ups
def get(name: str) -> Observable:
    """The family of a result name (``self_diffusion/LI`` → :data:`SELF_DIFFUSION`); KeyError if unknown."""
    entry = family(name)
    if entry is None:
        raise KeyError(f"{name!r} is not a registered observable; registered: {', '.join(e.name for e in REGISTRY)}")
    return entry


def family(name: str) -> Observable | None:
    """The registered family a result name belongs to, or None."""
    for e in REGISTRY:
        if e.owns(name):
            return e
    return None


def audit_group(name: str) -> AuditGroup:
    """The :class:`AuditGroup` called ``name``."""
    for g in AUDIT_GROUPS:
        if g.name == name:
            return g
    raise KeyError(f"{name!r} is not an audit group; groups: {', '.join(g.name for g in AUDIT_GROUPS)}")


def group_of(name: str) -> str | None:
    """The audit group of a result name (``thermo/density`` → ``thermodynamics``), or None."""
    if any(g.name == name for g in AUDIT_GROUPS):
        return name
    entry = family(name)
    return entry.audit_group if entry is not None else None


def category_group(category: str) -> str | None:
    """The audit group a results.json ``category`` stands for (ours or another tool's spelling), or None."""
    low = category.lower()
    for e in REGISTRY:
        if e.category == low:
            return e.audit_group
    for g in AUDIT_GROUPS:
        if low == g.name or low in g.categories:
            return g.name
    return None


def null_means_none(category: str) -> bool:
    """True when a null value of a results.json entry of ``category`` means "none by the registered rule"."""
    return any(e.null_means_none for e in REGISTRY if e.category == category.lower())


def template_categories(template: str) -> tuple[str, ...]:
    """The results.json categories a template presents (``analysis/53_diffusion`` → ``("self_diffusion",)``)."""
    return tuple(dict.fromkeys(e.category for e in REGISTRY if e.template == template))


def analysis_templates() -> tuple[str, ...]:
    """The per-case analysis templates (executor stage names), in registry order."""
    return tuple(sorted(dict.fromkeys(e.template for e in REGISTRY)))


def targets(case: str) -> dict[str, list[str]]:
    """Audit group → the targets the seed requires of ``case`` (registry entries' targets, merged)."""
    out: dict[str, list[str]] = {g.name: [] for g in AUDIT_GROUPS}
    for e in REGISTRY:
        out[e.audit_group] += [t for t in e.targets_for(case) if t not in out[e.audit_group]]
    return out


def target_categories(group: str) -> tuple[str, ...]:
    """Categories of the registry entries that declare ``group``'s targets (where a target is looked for
    first: the coordination numbers, not the RDF minima, deliver ``li_o_fsi``)."""
    return tuple(dict.fromkeys(e.category for e in REGISTRY if e.audit_group == group and e.targets))


def unanalysable_names() -> tuple[str, ...]:
    """Names recorded with the upstream state for a case that cannot be analysed (the required ones)."""
    return tuple(n for e in REGISTRY if e.required for n in e.unanalysable_names())


def report_order() -> tuple[Observable, ...]:
    """The registry in the report's order (:attr:`Observable.report_rank`, then registry order)."""
    return tuple(sorted(REGISTRY, key=lambda e: e.report_rank))


def evidence_figures() -> tuple[tuple[str, str], ...]:
    """(figure name, caption) of the report's evidence figures, in report order (each figure once)."""
    out: dict[str, str] = {}
    for e in report_order():
        if e.figure and e.evidence and e.figure not in out:
            out[e.figure] = e.evidence
    return tuple(out.items())


def block_bar_names(names: list[str]) -> list[str]:
    """Those of ``names`` that the registry draws in the block-bar figure, in the given order."""
    out = []
    for name in names:
        e = family(name)
        if e is not None and e.block_bars and re.search(e.block_bars, name):
            out.append(name)
    return out


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _PATTERNS:
        _PATTERNS[pattern] = re.compile(pattern)
    return _PATTERNS[pattern]
