"""The ``execute`` room: papermill orchestration per (run, system, stage), scrapbook capture, executors."""

from mdbench.execute.jobs import EXECUTORS, Job, load_plan, run_jobs
from mdbench.execute.parameters import ParameterError, read_schema, validate_parameters
from mdbench.execute.stage import KernelMissing, StageResult, check_kernel, run_stage, stage_outputs, template_path

__all__ = ["EXECUTORS", "Job", "KernelMissing", "ParameterError", "StageResult", "check_kernel", "load_plan",
           "read_schema",
           "run_jobs", "run_stage", "stage_outputs", "template_path", "validate_parameters"]
