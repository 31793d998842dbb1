"""The ``audit`` room of mdbench: SAEO audit of any run directory (ours or an evaluated agent's).

Public API: :func:`audit_run` (``from mdbench.audit import audit_run``) and :class:`AuditResult`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["audit_run", "AuditResult", "NotARunDirectory"]


def __getattr__(name: str) -> Any:  # lazy: keep ``mdbench --help`` fast
    if name == "audit_run":
        from mdbench.audit.core import audit_run

        return audit_run
    if name == "AuditResult":
        from mdbench.audit.model import AuditResult

        return AuditResult
    if name == "NotARunDirectory":
        from mdbench.audit.fabrication import NotARunDirectory

        return NotARunDirectory
    raise AttributeError(name)
