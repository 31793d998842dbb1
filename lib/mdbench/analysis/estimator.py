"""The estimator interface: what the pipeline hands an estimator, and what it gets back.

Every registered observable (:mod:`mdbench.analysis.observables`) names an estimator class following
:class:`Estimator`, in the spirit of MDAnalysis' ``AnalysisBase``: the constructor takes the case's
inputs and checks that what it reads (``inputs``) is there, :meth:`Estimator.run` computes and returns the
:class:`Estimate` (also kept as ``.results``), and :meth:`Estimator.state_inputs` /
:meth:`Estimator.sampling_checks` give the state classifier (:mod:`mdbench.analysis.states`) what it
needs for each result. Estimators never set states themselves: one classifier applies one set of rules.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from mdbench.analysis import observables as registry
from mdbench.analysis.observables import Observable
from mdbench.analysis.settings import AnalysisSettings


@dataclass
class CaseInputs:
    """What one case offers its estimators; each estimator names the fields it reads in ``inputs``.

    Attributes
    ----------
    settings : AnalysisSettings
        The registered settings (the same object the registrations were written from).
    case : str
        Case label.
    energy : EnergySeries
        Energy-file series (:func:`mdbench.analysis.thermo.read_energy_file`).
    guard_ps : float
        Guard interval in force [ps] (given, or detected by the registered rule).
    ensemble : str
        ``NPT`` or ``NVT`` (from the energy file's volume).
    trajectory : ReducedTrajectory
        The one-pass reduction (every frame).
    structure_frames : ReducedTrajectory
        Its structure frames (:meth:`ReducedTrajectory.structure_view`).
    windows, structure_windows : BlockWindows
        Guard and blocks on the frames of ``trajectory`` and of ``structure_frames``.
    treatment : dict
        How the trajectory was treated for neighbour-based results (declared with each of them).
    products : dict
        What earlier estimators share with later ones (``cutoffs``, ``temperature_K``, ``diffusion``, ...).
    """

    settings: AnalysisSettings
    case: str
    energy: Any = None
    guard_ps: float | None = None
    ensemble: str | None = None
    trajectory: Any = None
    structure_frames: Any = None
    windows: Any = None
    structure_windows: Any = None
    treatment: dict[str, Any] = field(default_factory=dict)
    products: dict[str, Any] = field(default_factory=dict)

    def missing(self, names: tuple[str, ...]) -> list[str]:
        """Those of ``names`` (fields, or ``products.<name>``) that are not available."""
        out = []
        for n in names:
            if n.startswith("products."):
                if n.split(".", 1)[1] not in self.products:
                    out.append(n)
            elif getattr(self, n, None) is None:
                out.append(n)
        return out


@dataclass
class Measurement:
    """One result of an estimator, before its state is decided.

    Attributes
    ----------
    entry : Observable
        The registered family it belongs to (category, registration kind).
    qualifiers : tuple of str
        Its name below the family (``("LI",)`` → ``self_diffusion/LI``).
    payload : dict
        ``value``, ``unit``, ``uncertainty``, ``blocks``, ``block_ranges_ps``, ``window``, ``diagnostics``.
    definition : str
        Definition text written with the result.
    state_inputs : dict
        Keyword arguments of :func:`mdbench.analysis.states.classify_observable` other than the upstream
        state: ``values``, ``failures``, ``sampling_checks``, ``too_short``, ``delivered``.
    details : dict
        Further data written with the result (curves, matrices).
    note : str
        Appended to the reason of an accepted (C) result.
    """

    entry: Observable
    qualifiers: tuple[str, ...]
    payload: dict[str, Any]
    definition: str
    state_inputs: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def name(self) -> str:
        """Result name (``self_diffusion/LI``)."""
        return self.entry.key(*self.qualifiers)


@dataclass
class Estimate:
    """What :meth:`Estimator.run` returns.

    Attributes
    ----------
    measurements : list of Measurement
        The results, in the order they are written.
    sections : dict
        Top-level sections of results.json this estimator fills (``structure``, ``onsager``, ...).
    figure_data : dict
        Objects the figures are drawn from (RDF curves, diffusion results, ...).
    products : dict
        Shared with later estimators (copied into :attr:`CaseInputs.products`).
    """

    measurements: list[Measurement] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    figure_data: dict[str, Any] = field(default_factory=dict)
    products: dict[str, Any] = field(default_factory=dict)


def new_figure(ncols: int = 1, figsize: tuple[float, float] = (6, 4), **kw: Any) -> tuple[Any, Any]:
    """(figure, axes) for a ``figures`` hook: one row of ``ncols`` panels (matplotlib is imported here, on first
    use, so an analysis without figures never loads it)."""
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=figsize, **kw)


class UndeclaredInput(RuntimeError):
    """An estimator read a product of another estimator that it did not declare in its ``inputs``."""


class DeclaredProducts(dict):
    """The products an estimator may read: reading one it did not declare raises :class:`UndeclaredInput`
    (a ``get`` too, so that a forgotten declaration can never turn into a silent "not delivered")."""

    def __init__(self, products: dict[str, Any], declared: tuple[str, ...], reader: str) -> None:
        super().__init__(products)
        self.declared = frozenset(declared)
        self.reader = reader

    def _allowed(self, name: Any) -> None:
        if name not in self.declared:
            raise UndeclaredInput(f"{self.reader} read the product {name!r} without declaring "
                                  f"'products.{name}' in its inputs (declared: {sorted(self.declared) or 'none'})")

    def __getitem__(self, name: str) -> Any:
        self._allowed(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:  # noqa: D102 - dict.get, refused when undeclared
        self._allowed(name)
        return super().get(name, default)

    def __contains__(self, name: object) -> bool:
        self._allowed(name)
        return super().__contains__(name)


def declared_products(cls: type) -> tuple[str, ...]:
    """Product names an estimator class reads (``products.<name>`` of its ``inputs`` and ``optional_inputs``)."""
    names = tuple(getattr(cls, "inputs", ())) + tuple(getattr(cls, "optional_inputs", ()))
    return tuple(n.split(".", 1)[1] for n in names if n.startswith("products."))


@runtime_checkable
class Estimator(Protocol):
    """The interface of every registered estimator.

    ``inputs`` names the :class:`CaseInputs` fields (and ``products.<name>``) it reads; the constructor
    ``Estimator(case, entries)`` takes the case and the registry entries it serves; :meth:`run` computes.
    """

    inputs: ClassVar[tuple[str, ...]]

    def run(self) -> Estimate:
        """Compute every result; returns (and keeps as ``self.results``) the :class:`Estimate`."""

    def state_inputs(self, name: str) -> dict[str, Any]:
        """Classifier inputs of the result ``name`` (values, failures, sampling checks, ...)."""

    def sampling_checks(self, name: str) -> dict[str, bool]:
        """The sampling diagnostics of the result ``name`` (True = passed)."""


class EstimatorBase:
    """Common constructor and look-ups of the registered estimators (subclasses implement :meth:`compute`)."""

    inputs: ClassVar[tuple[str, ...]] = ()
    #: Inputs it reads when they exist (``products.viscosity`` of the Yeh–Hummer correction): ordered like
    #: ``inputs``, but their absence is a result (not estimable), not an error.
    optional_inputs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, case: CaseInputs, entries: tuple[Observable, ...]) -> None:
        missing = case.missing(self.inputs)
        if missing:
            raise ValueError(f"{type(self).__name__} needs {', '.join(missing)}, which no earlier estimator or "
                             "the pipeline provided (declare it in the products of the registry entry that "
                             "computes it)")
        products = dict(case.products)
        case = dataclasses.replace(case, products=DeclaredProducts(products, declared_products(type(self)),
                                                                   type(self).__name__))
        self.case = case
        self.settings = case.settings
        self.entries = entries
        self.results: Estimate | None = None

    def compute(self) -> Estimate:
        """Subclasses: the results of this estimator."""
        raise NotImplementedError

    @classmethod
    def definition(cls, settings: AnalysisSettings) -> dict[str, dict[str, Any]]:
        """Its part of the registered definitions: registration kind → {key: text or value}, all read from
        ``settings`` (merged by :func:`mdbench.analysis.definitions.registration_definitions`; none by default)."""
        return {}

    @classmethod
    def figures(cls, estimate: Estimate, settings: AnalysisSettings) -> dict[str, Any]:
        """Its figures: figure name (the registry entry's ``figure``) → matplotlib Figure, drawn from the
        :class:`Estimate` it returned (saved by :func:`mdbench.analysis.results.write_figures`; none by default)."""
        return {}

    def run(self) -> Estimate:
        """Compute and keep the results (``self.results``)."""
        self.results = self.compute()
        return self.results

    def _measurement(self, name: str) -> Measurement:
        if self.results is None:
            raise RuntimeError(f"{type(self).__name__}.run() first")
        for m in self.results.measurements:
            if m.name == name:
                return m
        raise KeyError(f"{type(self).__name__} did not produce {name!r}")

    def state_inputs(self, name: str) -> dict[str, Any]:
        """Classifier inputs of the result ``name``."""
        return dict(self._measurement(name).state_inputs)

    def sampling_checks(self, name: str) -> dict[str, bool]:
        """Sampling diagnostics of the result ``name``."""
        return dict(self._measurement(name).state_inputs.get("sampling_checks") or {})


def estimator_plan(entries: tuple[registry.Observable, ...] | None = None
                   ) -> list[tuple[type, tuple[registry.Observable, ...]]]:
    """(estimator class, the registry entries it serves), each class once, in dependency order.

    An estimator that reads ``products.<name>`` (its ``inputs`` or ``optional_inputs``) runs after the
    estimator whose registry entries declare the product ``<name>``; where nothing orders two estimators
    the registry's order stands (a stable topological sort). A product read that no entry declares, two
    entries declaring one product, or a cycle is an error naming them.
    """
    served: dict[str, list[registry.Observable]] = {}
    for entry in registry.REGISTRY if entries is None else entries:
        served.setdefault(entry.estimator, []).append(entry)
    nodes = []
    for path, group in served.items():
        module, _, name = path.partition(":")
        nodes.append((getattr(importlib.import_module(module), name), tuple(group)))
    maker: dict[str, int] = {}
    for i, (cls, group) in enumerate(nodes):
        for product in (p for e in group for p in e.products):
            if product in maker and maker[product] != i:
                raise ValueError(f"product {product!r} is declared by {nodes[maker[product]][0].__name__} and "
                                 f"{cls.__name__}; one registry entry declares each product")
            maker[product] = i
    needs = []
    for cls, _group in nodes:
        unknown = [p for p in declared_products(cls) if p not in maker]
        if unknown:
            raise ValueError(f"{cls.__name__} reads {', '.join('products.' + p for p in unknown)}, which no "
                             "registry entry declares in its products")
        needs.append({maker[p] for p in declared_products(cls)})
    order: list[int] = []
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in order and needs[i] <= set(order)]
        if not ready:
            left = [nodes[i][0].__name__ for i in range(len(nodes)) if i not in order]
            raise ValueError(f"the estimators {', '.join(left)} read each other's products (a cycle)")
        order.append(ready[0])
    return [nodes[i] for i in order]
