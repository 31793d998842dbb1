"""Property: random corruptions of a valid run record never crash the audit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdbench.audit import audit_run
from mdbench.audit.model import ITEMS

RECORD_FILES = ("events.jsonl", "attempts.jsonl", "registrations.jsonl", "artifacts.json", "stage_states.json",
                "observables.json", "episode_terminal.json")
TARGETS = tuple(f"run_record/{n}" for n in RECORD_FILES) + ("analysis/W/results.json", "report.md")

corruption = st.tuples(
    st.sampled_from(TARGETS),
    st.sampled_from(["flip", "truncate", "delete", "garbage", "json", "nan"]),
    st.integers(min_value=0, max_value=10**6),
    st.one_of(st.binary(max_size=40), st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=12),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=12)),
)


def _apply(run: Path, target: str, kind: str, pos: int, payload) -> None:
    import json

    p = run / target
    data = p.read_bytes() if p.exists() else b""
    if kind == "delete":
        p.unlink(missing_ok=True)
    elif kind == "truncate":
        p.write_bytes(data[: pos % (len(data) + 1)])
    elif kind == "flip" and data:
        i = pos % len(data)
        p.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif kind == "garbage":
        blob = payload if isinstance(payload, bytes) else str(payload).encode()
        i = pos % (len(data) + 1)
        p.write_bytes(data[:i] + blob + data[i:])
    elif kind == "json":
        p.write_text(json.dumps(payload if not isinstance(payload, bytes) else payload.hex(), allow_nan=True))
    elif kind == "nan":
        p.write_bytes(data.replace(b"0.", b"NaN", 1 + pos % 3))


@pytest.mark.gromacs
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(corruptions=st.lists(corruption, min_size=1, max_size=3))
def test_random_corruptions_never_crash(built, tmp_path_factory, corruptions):
    run_src, bundle = built
    base = tmp_path_factory.mktemp("hostile")
    run = base / "run"
    shutil.copytree(run_src, run)
    for c in corruptions:
        _apply(run, *c)
    res = audit_run(run, bundle, base / "audit", reanalysis=False)
    assert set(res.episode_items) == set(ITEMS)
    assert 0.0 <= res.composite_final <= 100.0
    assert (base / "audit" / "saeo.json").is_file()
