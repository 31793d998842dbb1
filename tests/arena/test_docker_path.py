"""Harbor's Docker path: every task must be built from its Dockerfile, never replaced by a named image."""

from __future__ import annotations

import pytest

from mdbench.arena.harbor_compat import docker_path
from mdbench.arena.task import TASKS_DIR, list_tasks

TASKS = list_tasks(TASKS_DIR)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.short_name)
def test_harbor_builds_every_task_from_its_dockerfile(task):
    """Harbor 0.25/0.26 uses a set docker_image as it is (no --force-build): environment/ would never reach
    the container and the verifier would find no inputs."""
    decision = docker_path(task.path)
    assert not decision.uses_prebuilt_image, f"{task.path / 'task.toml'}: docker_image set next to a Dockerfile"
    assert decision.builds_dockerfile and decision.environment_reaches_container
