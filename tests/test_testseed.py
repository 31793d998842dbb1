"""The suite's one seed source: ``MDBENCH_TEST_SEED`` changes every simulation seed, a bad value is refused."""

from __future__ import annotations

import pytest

import _testseed


def test_default_env_override_and_distinct_purposes(monkeypatch):
    monkeypatch.delenv(_testseed.ENV_VAR, raising=False)
    default = {p: _testseed.seed_for(p) for p in ("audit/gen-seed", "audit/ld-seed", "build/micro/packmol")}
    assert _testseed.base_seed() == _testseed.DEFAULT_TEST_SEED
    assert len(set(default.values())) == 3                               # no two purposes share a stream
    assert all(1 <= s < 2**31 - 1 for s in default.values())            # valid for GROMACS and packmol
    monkeypatch.setenv(_testseed.ENV_VAR, str(_testseed.DEFAULT_TEST_SEED))
    assert {p: _testseed.seed_for(p) for p in default} == default       # same seed, same trajectories
    for value in ("1", "2"):
        monkeypatch.setenv(_testseed.ENV_VAR, value)
        assert _testseed.base_seed() == int(value)
        assert all(_testseed.seed_for(p) != s for p, s in default.items())
    monkeypatch.setenv(_testseed.ENV_VAR, "1")
    one = _testseed.seed_for("audit/gen-seed")
    monkeypatch.setenv(_testseed.ENV_VAR, "2")
    assert _testseed.seed_for("audit/gen-seed") != one


@pytest.mark.parametrize("bad", ["0", "-3", "x", "1.5"])
def test_bad_seed_is_refused_with_the_fix(monkeypatch, bad):
    monkeypatch.setenv(_testseed.ENV_VAR, bad)
    with pytest.raises(ValueError, match=r"MDBENCH_TEST_SEED=.* is not a positive integer; unset it"):
        _testseed.base_seed()
