"""The ``record`` room: the run-record contract (schema version 1.2).

See :class:`RunRecord` for the writer and :func:`mdbench.record.validate.validate_run` for the checker.
"""

from mdbench.record.store import (
    CASE_BUDGET_NS,
    CLAIMED_OUTCOMES,
    OBSERVABLE_STATE_VALUES,
    SCHEMA_VERSION,
    STAGE_STATE_VALUES,
    STUDY_BUDGET_NS,
    BudgetExceeded,
    RecordError,
    RunRecord,
    read_jsonl,
    run_relative,
    sha256_file,
    utc_now,
)

__all__ = [
    "CASE_BUDGET_NS", "CLAIMED_OUTCOMES", "OBSERVABLE_STATE_VALUES", "SCHEMA_VERSION", "STAGE_STATE_VALUES",
    "STUDY_BUDGET_NS", "BudgetExceeded", "RecordError", "RunRecord", "read_jsonl", "run_relative", "sha256_file", "utc_now",
]
