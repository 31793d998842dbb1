"""The machine-wide thread cap, as the engine has always named it (defined below every room in
:mod:`mdbench.threads`, so that the analysis and the executors read it without importing the engine)."""

from mdbench.threads import CONTRACT_THREAD_CAP, IdleCpus, ThreadSlots, default_thread_cap, idle_cpus

__all__ = ["CONTRACT_THREAD_CAP", "IdleCpus", "ThreadSlots", "default_thread_cap", "idle_cpus"]
