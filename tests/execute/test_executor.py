"""Executor: parameter validation before kernels, failed stages kept, resume, local vs Dask."""

from __future__ import annotations

import json
import shutil

import pytest

from mdbench.errors import InputError
from mdbench.execute import Job, ParameterError, load_plan, run_jobs, run_stage
from mdbench.execute import stage as stage_module
from mdbench.record import RunRecord
from mdbench.record.validate import validate_run


def _no_kernel(*args, **kwargs):  # a kernel start would be a failure of the test that installs this
    raise AssertionError("a kernel was started")


def events_of(run_dir, kind):
    return [e for e in RunRecord(run_dir).events() if e["type"] == kind]


@pytest.mark.parametrize("params, name", [({"valu": 2.0}, "valu"), ({"value": "two"}, "value"),
                                          ({"value": True}, "value")])
def test_bad_parameters_rejected_before_any_kernel(tmp_path, monkeypatch, params, name):
    def no_kernel(*args, **kwargs):  # a kernel start would be a failure of this test
        raise AssertionError("a kernel was started")

    monkeypatch.setattr(stage_module, "check_kernel", no_kernel)
    with pytest.raises(ParameterError) as info:
        run_stage(tmp_path, "DE", "selftest/01_echo", params)
    assert info.value.parameter == name and repr(name) in str(info.value)
    assert not (tmp_path / "notebooks").exists()
    assert RunRecord(tmp_path).events() == []


def test_missing_required_parameter(tmp_path):
    from mdbench.execute import validate_parameters
    from mdbench.execute.stage import template_path

    with pytest.raises(ParameterError, match="'run_dir': missing"):
        validate_parameters(template_path("selftest/01_echo"), {"value": 1.0})


def test_missing_kernel_says_make_setup(tmp_path):
    with pytest.raises(stage_module.KernelMissing, match="make setup"):
        run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 2.0}, kernel_name="no-such-kernel-xyz")


def test_unknown_stage(tmp_path):
    with pytest.raises(InputError, match="no template for stage 'study/99_nothing'"):
        run_stage(tmp_path, "DE", "study/99_nothing")


def test_failing_cell_keeps_notebook_and_other_jobs_finish(tmp_path):
    jobs = [Job(str(tmp_path), "DE", "selftest/01_echo", {"value": 2.0}),
            Job(str(tmp_path), "HCE", "selftest/02_fail", {}),
            Job(str(tmp_path), "HCE", "selftest/01_echo", {"value": 5.0}),
            Job(str(tmp_path), "LHCE", "selftest/01_echo", {"value": 3.0})]
    results = run_jobs(jobs, executor="local", workers=2, verbose=False)
    assert [r.status for r in results] == ["finished", "failed", "not_reached", "finished"]
    failed = results[1]
    assert "deliberate failure" in failed.error
    executed = json.loads((tmp_path / "notebooks" / "HCE" / "02_fail.ipynb").read_text())
    tracebacks = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert tracebacks and tracebacks[0]["ename"] == "RuntimeError"
    failed_events = events_of(tmp_path, "stage_failed")
    assert len(failed_events) == 1
    payload = failed_events[0]["payload"]
    assert payload["system"] == "HCE" and payload["notebook"] == "notebooks/HCE/02_fail.ipynb"
    assert len(payload["notebook_sha256"]) == 64
    assert results[0].scraps == {"system": "DE", "value_squared": 4.0, "label": "demo"}
    assert json.loads((tmp_path / "notebooks" / "LHCE" / "01_echo.scraps.json").read_text())["value_squared"] == 9.0
    assert validate_run(tmp_path) == []


def test_resume_skips_finished_and_reruns_changed(tmp_path):
    first = run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 2.0})
    again = run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 2.0})
    changed = run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 4.0})
    forced = run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 4.0}, force=True)
    assert [first.status, again.status, changed.status, forced.status] == ["finished", "skipped", "finished", "finished"]
    assert again.scraps == first.scraps and changed.scraps["value_squared"] == 16.0
    assert len(events_of(tmp_path, "stage_finished")) == 3
    # a tampered executed notebook is not trusted: the stage reruns
    (tmp_path / "notebooks" / "DE" / "01_echo.ipynb").write_text("{}")
    assert run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 4.0}).status == "finished"
    # the run directory's path is no input (run_dir is injected, not hashed): a moved copy skips what finished,
    # without a kernel
    moved_dir = tmp_path.with_name(tmp_path.name + "-moved")
    shutil.copytree(tmp_path, moved_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stage_module, "check_kernel", _no_kernel)
        moved = run_stage(moved_dir, "DE", "selftest/01_echo", {"value": 4.0})
    assert moved.status == "skipped" and moved.scraps["value_squared"] == 16.0


def test_local_and_dask_give_identical_scraps(tmp_path):
    """The plan's first job on each executor: the same scraps, the exact ones the echo template must glue (the
    local executor's run of several jobs on 2 workers is checked in test_failing_cell_keeps_notebook_...)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("run_dir: {run}\nsystems: [DE, HCE]\nstages: [selftest/01_echo]\nparams: {{value: 1.5, label: x}}\n"
                    .format(run="runs/a"))
    jobs, _ = load_plan(plan)
    assert [(j.system, j.stage) for j in jobs] == [("DE", "selftest/01_echo"), ("HCE", "selftest/01_echo")]
    local = run_jobs(jobs[:1], executor="local", workers=1, verbose=False)
    dask_jobs = [Job(str(tmp_path / "runs" / "b"), j.system, j.stage, j.params) for j in jobs[:1]]
    distributed = run_jobs(dask_jobs, executor="dask", workers=1, verbose=False)
    assert [r.status for r in local + distributed] == ["finished"] * 2
    assert local[0].scraps == distributed[0].scraps == {"system": "DE", "value_squared": 2.25, "label": "x"}


def test_malformed_plan_names_file_and_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("run_dir: x\nsystems: [DE\nstages: [a]\n")
    with pytest.raises(InputError) as info:
        load_plan(plan)
    assert str(plan) in str(info.value) and info.value.line is not None


def test_rerun_sets_aside_the_earlier_notebook_and_keeps_the_inventory_true(tmp_path):
    """A failed stage's notebook is evidence: the rerun moves it (and its inventory entry) to discarded/."""
    assert run_stage(tmp_path, "DE", "selftest/02_fail", {}).status == "failed"
    listed = RunRecord(tmp_path).artifacts()["notebooks/DE/02_fail.ipynb"]["sha256"]
    assert run_stage(tmp_path, "DE", "selftest/02_fail", {"fail": False}).status == "finished"
    inv = RunRecord(tmp_path).artifacts()
    assert inv["notebooks/DE/discarded/02_fail_01/02_fail.ipynb"]["sha256"] == listed
    assert "failed" in (tmp_path / "notebooks/DE/discarded/02_fail_01/02_fail.ipynb").read_text()
    assert events_of(tmp_path, "stage_interrupted") == [] and validate_run(tmp_path) == []


def test_execution_left_open_by_a_killed_driver_is_recorded_and_set_aside(tmp_path):
    """What a SIGKILL of the driver leaves — a start event never closed, a partial notebook — is recorded."""
    rec = RunRecord(tmp_path)
    start = rec.append_event("stage_started", {"system": "DE", "stage": "selftest/01_echo",
                                               "notebook": "notebooks/DE/01_echo.ipynb"})
    partial = tmp_path / "notebooks/DE/01_echo.ipynb"
    partial.parent.mkdir(parents=True)
    partial.write_text('{"cells": [')
    assert run_stage(tmp_path, "DE", "selftest/01_echo", {"value": 2.0}).status == "finished"
    (ev,) = events_of(tmp_path, "stage_interrupted")
    assert ev["payload"]["started_event"] == start["id"] and ev["payload"]["stage"] == "selftest/01_echo"
    moved = events_of(tmp_path, "artifacts_set_aside")[0]["payload"]
    assert moved["reason"] == "interrupted execution" and moved["moved"][0]["to"] == \
        "notebooks/DE/discarded/01_echo_01/01_echo.ipynb"
    assert validate_run(tmp_path) == []

