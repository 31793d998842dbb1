"""Harbor's reward rules: each malformed reward file is a verifier error naming the file; same verdicts as Harbor."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mdbench.arena import rewards as rw
from mdbench.arena.harbor_compat import probe

#: (file name, content, expected: rewards dict or Harbor's exception type)
CASES = [
    ("reward.json", '{"correctness": 1.0, "process": 0.5}', {"correctness": 1.0, "process": 0.5}),
    ("reward.json", '{"correctness": "1.0", "process": 1}', "VerifierOutputParseError"),   # a string, not a number
    ("reward.json", '{"correctness": NaN}', "VerifierOutputParseError"),
    ("reward.json", '{"correctness": Infinity}', "VerifierOutputParseError"),
    ("reward.json", '{"correctness": 1e309}', "VerifierOutputParseError"),                # overflows to inf
    ("reward.json", '{"correctness": null}', "VerifierOutputParseError"),
    ("reward.json", '{"correctness": 1', "VerifierOutputParseError"),                      # truncated
    ("reward.json", "", "RewardFileEmptyError"),
    ("reward.json", '{"reward": 1, "passed": true}', {"reward": 1, "passed": True}),      # Harbor: bool is an int
    ("reward.txt", "0.75\n", {"reward": 0.75}),
    ("reward.txt", "", "RewardFileEmptyError"),
    ("reward.txt", "0.5 0.7", "VerifierOutputParseError"),
    ("reward.txt", "nan", "VerifierOutputParseError"),
    (None, None, "RewardFileNotFoundError"),
]


def _write(tmp_path: Path, i: int, name: str | None, content: str | None) -> Path:
    d = tmp_path / f"case{i}"
    d.mkdir()
    if name is not None:
        (d / name).write_text(content)
    return d


@pytest.mark.parametrize(("name", "content", "expected"), CASES)
def test_reward_files_by_harbor_rules(tmp_path, name, content, expected):
    d = _write(tmp_path, 0, name, content)
    if isinstance(expected, dict):
        assert rw.read_rewards(d) == expected
        return
    with pytest.raises(rw.RewardFileError) as err:
        rw.read_rewards(d)
    assert err.value.exception_type == expected
    assert (name is None or name in str(err.value)) and str(d) in str(err.value)


def test_json_wins_over_txt_and_non_object_is_rejected(tmp_path):
    d = _write(tmp_path, 0, "reward.json", '{"correctness": 0.25}')
    (d / "reward.txt").write_text("1.0")
    assert rw.read_rewards(d) == {"correctness": 0.25}
    (d / "reward.json").write_text("[1, 2]")
    with pytest.raises(rw.RewardFileError, match="not an object"):
        rw.read_rewards(d)


def test_harbor_reads_each_file_the_same_way(harbor_env, tmp_path):
    """Harbor's own Verifier readers give the same reward or the same exception type for every case."""
    dirs = [_write(tmp_path, i, n, c) for i, (n, c, _) in enumerate(CASES)]
    answers = probe("reward", *dirs)["items"]
    for (name, content, expected), item in zip(CASES, answers):
        if isinstance(expected, dict):
            assert item["ok"] and item["rewards"] == expected, (name, content, item)
        else:
            assert not item["ok"] and item["exception_type"] == expected, (name, content, item)


def test_error_policy_table_agrees_with_harbor(harbor_env):
    names = sorted(rw.NO_VALID_REWARD | rw.GRADED_AFTER | {"RuntimeError", "TimeoutError", "SomethingNew"})
    for item in probe("policy", *names)["items"]:
        assert rw.has_valid_reward(item["path"]) == item["has_valid_reward"], item
        if item["path"] in rw.GRADED_AFTER:
            assert item["should_grade"], item


def test_harbor_mean_of_one_key_and_of_several():
    assert rw.harbor_mean([{"reward": 1.0}, {"reward": 0.0}]) == {"mean": 0.5}
    assert rw.harbor_mean([{"correctness": 1.0, "process": 0.5}, {"correctness": 0.0}]) == \
        {"correctness": 0.5, "process": 0.25}
    assert rw.harbor_mean([]) == {}


def test_malformed_reward_in_a_trial_is_not_read_as_partial(tmp_path):
    """The aggregator's old behaviour kept only `process` of {"correctness": "1.0", "process": 1} and reported
    correctness 1; now the trial has no reward, a reward error, and correctness 0."""
    from mdbench.arena.aggregate import load_trials

    trial = tmp_path / "job" / "t__abc"
    (trial / "verifier").mkdir(parents=True)
    (trial / "verifier" / "reward.json").write_text('{"correctness": "1.0", "process": 1}')
    (trial / "result.json").write_text(json.dumps({
        "task_name": "mdbench/x", "trial_name": "t__abc", "agent_info": {"name": "a", "version": "1"},
        "verifier_result": None, "exception_info": None}))
    row = load_trials([tmp_path / "job"]).iloc[0]
    assert row["correctness"] == 0.0 and pd.isna(row["process"])
    assert "VerifierOutputParseError" in row["reward_error"] and not row["reward_found"]
