"""The hardened reader: every trick an agent can leave behind is refused with a reason, never a crash or hang."""

from __future__ import annotations

import json
import os
import threading

import pytest

from mdbench.untrusted import (Refused, loads, number, read_bytes, read_json, read_text, shown, try_number,
                               try_read_json, walk, write_new)


def test_a_plain_json_file_reads(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"x": [1, 2.5, "s"], "n": None}))
    assert read_json(tmp_path / "a.json") == {"x": [1, 2.5, "s"], "n": None}


@pytest.mark.parametrize("text, reason", [
    ("[" * 200_000 + "]" * 200_000, "too_deep"),
    ('{"a": ' * 100 + "1" + "}" * 100, "too_deep"),
    ("[1e308, 1e999]", "non_finite"),
    ('{"cost": NaN}', "non_finite"),
    ('{"cost": -Infinity}', "non_finite"),
    ("[" + "9" * 400 + "]", "int_too_long"),
    ("[" + "9" * 5000 + "]", "int_too_long"),
    ("{not json", "not_json"),
    ("", "not_json"),
])
def test_hostile_json_is_refused_with_its_reason(tmp_path, text, reason):
    with pytest.raises(Refused) as info:
        loads(text)
    assert info.value.reason == reason
    assert "\n" not in str(info.value)
    (tmp_path / "f.json").write_text(text)
    value, refusal = try_read_json(tmp_path / "f.json")
    assert value is None and refusal.reason == reason and str(tmp_path / "f.json") in str(refusal)


def test_brackets_inside_strings_do_not_count_as_depth():
    text = json.dumps({"s": "[" * 1000 + '\\"{' * 10})
    assert loads(text)["s"].startswith("[[[")


def test_a_symlink_is_refused_not_followed(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"answer": 42}')
    (tmp_path / "link.json").symlink_to(secret)
    with pytest.raises(Refused) as info:
        read_json(tmp_path / "link.json")
    assert info.value.reason == "symlink"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trajectory.json"
    os.mkfifo(fifo)
    done = threading.Event()
    outcome: list[str] = []

    def reader():
        try:
            read_bytes(fifo)
        except Refused as exc:
            outcome.append(exc.reason)
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    assert outcome == ["not_regular"]


def test_devices_directories_and_missing_files(tmp_path):
    assert pytest.raises(Refused, read_bytes, "/dev/zero").value.reason == "not_regular"
    assert pytest.raises(Refused, read_bytes, tmp_path).value.reason == "is_directory"
    assert pytest.raises(Refused, read_bytes, tmp_path / "nope").value.reason == "missing"


def test_size_cap(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 2048)
    assert len(read_bytes(tmp_path / "big", max_bytes=2048)) == 2048
    assert pytest.raises(Refused, read_bytes, tmp_path / "big", max_bytes=2047).value.reason == "too_large"
    (tmp_path / "bin").write_bytes(b"\xff\xfeok")
    assert read_text(tmp_path / "bin").endswith("ok")


def test_walk_never_follows_links_and_stops_at_caps(tmp_path):
    deep = tmp_path / "run"
    d = deep
    for i in range(50):
        d = d / f"d{i}"
    d.mkdir(parents=True)
    (deep / "f.txt").write_text("hi")
    (deep / "escape").symlink_to("/etc")
    w = walk(deep, max_depth=10)
    kinds = {e.relpath: e.kind for e in w.entries}
    assert kinds["escape"] == "symlink" and kinds["f.txt"] == "file"
    assert not any(p.startswith("escape/") for p in kinds)
    assert w.truncated and "deeper" in w.reason
    many = tmp_path / "many"
    many.mkdir()
    for i in range(30):
        (many / f"{i}").write_text("")
    w = walk(many, max_entries=10)
    assert len(w.entries) == 10 and w.truncated
    with pytest.raises(Refused):
        walk(deep / "escape")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, True, "3", None, 10 ** 400])
def test_numbers_must_be_finite_and_in_range(value):
    x, why = try_number(value, name="usd")
    assert x is None and why.startswith("usd")
    with pytest.raises(Refused):
        number(value, name="usd")
    assert number(2, name="tokens") == 2.0


def test_write_new_never_writes_through_a_planted_link(tmp_path):
    decoy = tmp_path / "root-owned.txt"
    decoy.write_text("precious")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "reward-details.json").symlink_to(decoy)
    write_new(logs / "reward-details.json", '{"reward": 0}')
    assert decoy.read_text() == "precious"
    assert not (logs / "reward-details.json").is_symlink()
    assert (logs / "reward-details.json").read_text() == '{"reward": 0}'
    os.mkfifo(logs / "test-stdout.txt")
    write_new(logs / "test-stdout.txt", b"ok")
    assert (logs / "test-stdout.txt").read_bytes() == b"ok"
    (logs / "d").mkdir()
    assert pytest.raises(Refused, write_new, logs / "d", "x").value.reason == "is_directory"


def test_a_name_is_shown_on_one_line_with_its_control_characters_escaped():
    assert shown("cases/DE/evil\nINJECTED\x1b[31m é.xtc") == "cases/DE/evil\\nINJECTED\\x1b[31m é.xtc"
    assert shown("x" * 500, max_chars=10) == "x" * 10 + "…"
