"""Harbor's Docker path: every task must be built from its Dockerfile, never replaced by a named image."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdbench.arena.harbor_compat import DockerPath, docker_path
from mdbench.arena.task import TASKS_DIR, list_tasks

TASKS = list_tasks(TASKS_DIR)
#: A task as all 17 were before issue 19 (docker_image next to a Dockerfile); see its README.md.
PRE_FIX_TASK = Path(__file__).parent / "fixtures" / "pre_fix_task"


def check_builds_from_dockerfile(task_dir: Path) -> None:
    """The check of every task: Harbor 0.25/0.26 uses a set docker_image as it is (no --force-build), so
    environment/ would never reach the container and the verifier would find no inputs."""
    decision = docker_path(task_dir)
    assert not decision.uses_prebuilt_image, f"{task_dir / 'task.toml'}: docker_image set next to a Dockerfile"
    assert decision.builds_dockerfile and decision.environment_reaches_container


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.short_name)
def test_harbor_builds_every_task_from_its_dockerfile(task):
    check_builds_from_dockerfile(task.path)


def test_the_check_fails_on_the_pre_fix_task_shape():
    """The same check on the task as it was: the named image wins, the Dockerfile is not built, environment/
    is not uploaded — unless ``--force-build``."""
    with pytest.raises(AssertionError, match="docker_image set next to a Dockerfile"):
        check_builds_from_dockerfile(PRE_FIX_TASK)
    assert docker_path(PRE_FIX_TASK) == DockerPath(uses_prebuilt_image=True, uploads_environment_dir=False,
                                                   builds_dockerfile=False)
    assert docker_path(PRE_FIX_TASK, force_build=True).builds_dockerfile
