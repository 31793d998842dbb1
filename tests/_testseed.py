"""The one place every test draws its simulation seeds from: ``MDBENCH_TEST_SEED`` (default 2026).

GROMACS (``gen-seed`` velocities, ``ld-seed`` for the stochastic thermostat/barostat, ``genion -seed``) and
packmol (``seed``) each get a seed derived from the base seed and a purpose label, so two purposes never share a
random stream and one change of ``MDBENCH_TEST_SEED`` changes every trajectory of the suite. Assertions on
GROMACS-backed results must hold for any seed: ``make test-seeds`` runs those tests with two of them.
"""

from __future__ import annotations

import os
import zlib

ENV_VAR = "MDBENCH_TEST_SEED"
DEFAULT_TEST_SEED = 2026
#: GROMACS takes a signed 32-bit seed (-1 = random); packmol any positive integer.
_SEED_SPAN = 2**31 - 1


def base_seed() -> int:
    """``MDBENCH_TEST_SEED`` as a positive integer (default :data:`DEFAULT_TEST_SEED`).

    Raises
    ------
    ValueError
        When the variable is set to something that is not a positive integer (the message names the fix).
    """
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_TEST_SEED
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV_VAR}={raw!r} is not a positive integer; unset it or set e.g. {ENV_VAR}=1")
    return value


def seed_for(purpose: str) -> int:
    """Seed in [1, 2**31 - 1] for one purpose (e.g. ``"audit/gen-seed"``), a fixed function of the base seed."""
    mixed = zlib.crc32(f"{base_seed()}:{purpose}".encode()) ^ (base_seed() * 2654435761 & 0xFFFFFFFF)
    return 1 + mixed % (_SEED_SPAN - 1)
