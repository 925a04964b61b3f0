"""A batch that cannot use its store is not retried: a full disk or a refused store does not fix
itself between attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import UUID

from prefect import flow
from prefect.client.orchestration import get_client

from gymflow.config import EvalConfig
from gymflow.rollouts.plan import resolve
from gymflow.store.db import StoreError
from gymflow.tasks.rollouts import collect_batch


async def _run_count(task_run_id: UUID) -> int:
    async with get_client() as client:
        return (await client.read_task_run(task_run_id)).run_count


def test_a_store_error_is_not_retried(prefect_api, tmp_path: Path) -> None:
    plan = resolve(EvalConfig(benchmark="arithmetic-smoke", limit=2, out=str(tmp_path / "none")))

    @flow
    def one_batch() -> dict:
        # no store was ever created at plan.run_dir, so the batch's connect() raises StoreError
        state = collect_batch.with_options(retry_delay_seconds=0)(
            plan, plan.keys(), "http://127.0.0.1:9/v1", return_state=True
        )
        return {
            "failed": state.is_failed(),
            "error": state.result(raise_on_failure=False),
            "task_run_id": state.state_details.task_run_id,
        }

    outcome = one_batch()
    assert outcome["failed"]
    assert isinstance(outcome["error"], StoreError)
    assert "no gymflow store here" in str(outcome["error"])
    assert asyncio.run(_run_count(outcome["task_run_id"])) == 1, "retries=2, but none was run"
