"""Where a run's model calls go: the configured server, or a local policy server started for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from gymflow.core.config import EvalConfig
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

    @property
    def run_id(self) -> str: ...


def policy_table(plan: PolicyPlan) -> dict[str, PolicyEntry]:
    """The local policy's table for every task of the plan, keyed by rendered prompt."""
    tasks = list(plan.all_tasks)
    return build_table(
        tasks, [plan.prompts[t.task_id] for t in tasks], plan.config.model.skill_seed
    )


def local_policy_server(plan: PolicyPlan) -> LocalPolicyServer:
    model = plan.config.model
    return LocalPolicyServer(
        policy_table(plan), seed=model.skill_seed, faults=model.faults, behaviour=model.simulate
    )


#: Local policy servers launched ahead of their run (`launched_early`), by run id.
_launched: dict[str, LocalPolicyServer] = {}
_launched_lock = threading.Lock()


def _take_launched(plan: PolicyPlan) -> LocalPolicyServer | None:
    with _launched_lock:
        return _launched.pop(plan.run_id, None)


@contextmanager
def launched_early(plan: PolicyPlan) -> Iterator[None]:
    """Launch the run's local policy server now, without waiting for it; the run's
    `model_endpoint` inside takes it over. Its start-up (a Python process importing the policy:
    0.4 s on a quiet machine) then overlaps what comes before collecting (`gym eval run` imports
    Prefect and starts the flow run meanwhile). Stopped on the way out if nothing took it."""
    if plan.config.model.kind != "local":
        yield
        return
    with _launched_lock:
        _launched[plan.run_id] = local_policy_server(plan).launch()
    try:
        yield
    finally:
        left = _take_launched(plan)
        if left is not None:
            left.stop()


@contextmanager
def model_endpoint(plan: PolicyPlan) -> Iterator[str]:
    """Yield the base URL (…/v1) to send this run's requests to."""
    config = plan.config
    ensure_open_files(config.concurrency, remote_resources=config.resources_url is not None)
    if config.model.kind != "local":
        yield config.model.base_url
        return
    server = _take_launched(plan) or local_policy_server(plan).launch()
    try:
        yield server.wait_ready().base_url
    finally:
        server.stop()
