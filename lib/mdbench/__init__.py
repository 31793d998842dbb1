"""mdbench: run, audit and score molecular-dynamics studies.

Rooms follow the pipeline: ``inputs`` → ``build`` → ``engine`` → ``analysis`` → ``audit`` → ``report``,
with ``record`` (the run-record contract), ``execute`` (papermill orchestration), ``arena`` (task suites)
and ``sdl`` (campaign replay) beside them. Importing the package has no side effects.
"""

__version__ = "0.1.0"

from mdbench.errors import MdbenchError  # noqa: E402

__all__ = ["MdbenchError", "__version__"]
