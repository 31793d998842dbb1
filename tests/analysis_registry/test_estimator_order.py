"""Estimators run in the order their declared inputs and products require, and an undeclared read is refused."""

from __future__ import annotations

import dataclasses

import pytest

from mdbench.analysis import observables as registry
from mdbench.analysis.diffusion import YehHummerEstimator
from mdbench.analysis.estimator import CaseInputs, EstimatorBase, UndeclaredInput
from mdbench.analysis.pipeline import estimator_plan
from mdbench.analysis.settings import AnalysisSettings


def _order(entries=None) -> list[str]:
    return [cls.__name__ for cls, _ in estimator_plan(entries)]


def test_every_product_is_made_before_it_is_read():
    plan = estimator_plan()
    made: set[str] = set()
    for cls, entries in plan:
        names = cls.inputs + getattr(cls, "optional_inputs", ())
        reads = [n.split(".", 1)[1] for n in names if n.startswith("products.")]
        assert set(reads) <= made, (cls.__name__, reads, made)
        made |= {p for e in entries for p in e.products}


def test_a_reordered_registry_gives_the_same_dependency_order():
    reordered = tuple(reversed(registry.REGISTRY))
    order = _order(reordered)
    assert order.index("ViscosityEstimator") < order.index("YehHummerEstimator")
    assert order.index("RdfEstimator") < order.index("CoordinationEstimator")
    assert order.index("ThermoEstimator") < order.index("ViscosityEstimator")


def test_yeh_hummer_declares_the_viscosity_it_reads():
    assert "products.viscosity" in YehHummerEstimator.optional_inputs


def test_a_read_nobody_declares_is_refused():
    entry = dataclasses.replace(registry.VISCOSITY, estimator="mdbench.analysis.diffusion:YehHummerEstimator")
    with pytest.raises(ValueError, match="products.diffusion"):
        estimator_plan((entry,))


class _Sneaky(EstimatorBase):
    inputs = ("products.cutoffs",)

    def compute(self):
        return self.case.products.get("viscosity")


def test_an_undeclared_read_at_run_time_raises():
    case = CaseInputs(AnalysisSettings(), "X", products={"cutoffs": {}, "viscosity": object()})
    with pytest.raises(UndeclaredInput, match="viscosity"):
        _Sneaky(case, (registry.RDF,)).run()
