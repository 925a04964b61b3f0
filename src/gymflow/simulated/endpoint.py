"""Where a run's model calls go: the configured server, or a local policy server started for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from gymflow.config import EvalConfig
from gymflow.core.tasks import Task
from gymflow.models.open_files import ensure_open_files
from gymflow.simulated.local_server import LocalPolicyServer
from gymflow.simulated.policy import PolicyEntry, build_table


class PolicyPlan(Protocol):
    """What the simulated policy needs of a run's plan (gymflow.rollouts.plan.RunPlan is one)."""

    @property
    def config(self) -> EvalConfig: ...

    @property
    def all_tasks(self) -> tuple[Task, ...]: ...

    @property
    def prompts(self) -> dict[str, str]: ...


def policy_table(plan: PolicyPlan) -> dict[str, PolicyEntry]:
    """The local policy's table for every task of the plan, keyed by rendered prompt."""
    tasks = list(plan.all_tasks)
    return build_table(
        tasks, [plan.prompts[t.task_id] for t in tasks], plan.config.model.skill_seed
    )


def local_policy_server(plan: PolicyPlan) -> LocalPolicyServer:
    model = plan.config.model
    return LocalPolicyServer(policy_table(plan), seed=model.skill_seed, faults=model.faults)


@contextmanager
def model_endpoint(plan: PolicyPlan) -> Iterator[str]:
    """Yield the base URL (…/v1) to send this run's requests to."""
    config = plan.config
    ensure_open_files(config.concurrency, remote_resources=config.resources_url is not None)
    if config.model.kind != "local":
        yield config.model.base_url
        return
    with local_policy_server(plan) as server:
        yield server.base_url
