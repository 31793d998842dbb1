"""One Harbor version: the pyproject extra, the Makefile's harbor-env stamp and harbor_compat agree."""

from __future__ import annotations

import re
import tomllib

from mdbench.arena.harbor_compat import HARBOR_VERSION
from mdbench.paths import PROJECT_ROOT


def test_harbor_pin_is_one_version():
    extra = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["harbor"]
    assert extra == [f"harbor=={HARBOR_VERSION}; python_version >= '3.12'"]
    make = (PROJECT_ROOT / "Makefile").read_text()
    assert re.search(r"^HARBOR_VERSION := (\S+)$", make, re.M).group(1) == HARBOR_VERSION
    assert ".venv-harbor/" in (PROJECT_ROOT / ".gitignore").read_text().splitlines()


def test_installed_harbor_is_the_pinned_one(harbor_env):
    from mdbench.arena.harbor_compat import probe

    assert probe("policy", "AgentTimeoutError")["harbor_version"] == HARBOR_VERSION
