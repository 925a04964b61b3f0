"""A batch that cannot use its store is not retried: a full disk or a refused store does not fix
itself between attempts."""

from __future__ import annotations

import asyncio
from contextlib import closing
from pathlib import Path
from uuid import UUID

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.utilities.annotations import quote

from gymflow.core.config import EvalConfig
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import prepare_run
from gymflow.steps.rollouts import collect_batch
from gymflow.store.db import StoreFailure, connect


async def _run_count(task_run_id: UUID) -> int:
    async with get_client() as client:
        return (await client.read_task_run(task_run_id)).run_count


class _RefusingStore:
    """A collector whose store refuses every commit, as a full disk does."""

    def __init__(self, plan, con) -> None:
        self.plan, self.con, self.runs = plan, con, 0

    def run(self, keys) -> None:
        self.runs += 1
        raise StoreFailure(f"run store: cannot commit {len(keys)} rollouts (disk full?)")


def test_a_store_error_is_not_retried(prefect_api, tmp_path: Path) -> None:
    config = EvalConfig(benchmark="arithmetic-smoke", limit=2, out=str(tmp_path / "run"))
    plan = resolve(config)
    prepare_run(plan, False)
    with closing(connect(plan.run_dir)) as con:
        collector = _RefusingStore(plan, con)

        @flow
        def one_batch() -> dict:
            state = collect_batch.with_options(retry_delay_seconds=0)(
                quote(plan.keys()), quote(collector), return_state=True
            )
            return {
                "failed": state.is_failed(),
                "error": state.result(raise_on_failure=False),
                "task_run_id": state.state_details.task_run_id,
            }

        outcome = one_batch()
    assert outcome["failed"]
    assert isinstance(outcome["error"], StoreFailure)
    assert "disk full" in str(outcome["error"])
    assert collector.runs == 1
    assert asyncio.run(_run_count(outcome["task_run_id"])) == 1, "retries=2, but none was run"
