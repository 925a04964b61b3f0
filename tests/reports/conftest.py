"""Runs to report on, built once per session: two real `gym eval run`s (a clean one, and one with
injected server errors and no retries, so some rollouts fail), and a store constructed with the
store's own writers that holds every outcome, hostile strings, and a second verifier version."""

from __future__ import annotations

import dataclasses
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gymflow.config import EvalConfig
from gymflow.records import (
    COMPLETED,
    FAILED,
    VERIFIED,
    VERIFY_ERROR,
    ModelCall,
    Rollout,
    Verification,
    rollout_id,
)
from gymflow.rollouts.plan import resolve
from gymflow.store.db import connect
from gymflow.store.runs import register_run
from gymflow.store.writer import insert_rows, register_verifier_version, write_rollouts
from tests.conftest import gym

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "reports"

# What a hostile model, tool or dataset could write. Had any of it been parsed as markup, it
# would set the page title or a DOM marker, or fetch a URL.
PAYLOAD = (
    '<script>document.title="PWNED";window.__pwned=1</script>'
    "<img src=x onerror=\"document.title='PWNED';document.body.dataset.pwned=1\">"
    "</textarea></pre></details></svg>"
    "<a href=\"javascript:document.title='PWNED'\">click me</a>"
    '<svg onload="document.body.dataset.pwned=1"></svg>'
    '<iframe src="https://example.com/"></iframe>'
)
EVIL_TASK = 'evil-<b onmouseover="x">task</b><script>window.__pwned=1</script>'

FAULTY_CONFIG = """\
benchmark: arithmetic-smoke
limit: 10
repeats: 3
out: faulty
model:
  skill_seed: 1
  max_retries: 0
  faults:
    rate_500: 0.25
"""


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reports")


@pytest.fixture(scope="session")
def cli_runs(workdir: Path) -> dict[str, Path]:
    """`gym eval run` twice, concurrently, each with its own Prefect home."""
    (workdir / "faulty.yaml").write_text(FAULTY_CONFIG)
    commands = {
        "clean": (
            "eval",
            "run",
            "--benchmark",
            "arithmetic-smoke",
            "--limit",
            "10",
            "--repeats",
            "3",
            "--out",
            "clean",
        ),
        "faulty": ("eval", "run", "faulty.yaml"),
    }

    def run(name: str) -> None:
        home = workdir / f"prefect-{name}"
        home.mkdir()
        env = {
            "PREFECT_HOME": str(home),
            # Two servers starting at once on a shared 2-core machine can take a while.
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        }
        gym(*commands[name], cwd=workdir, env=env, check=True)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, commands))
    return {name: workdir / name for name in commands}


@functools.cache
def profile_json(run_dir: Path, *extra: str) -> dict:
    """`gym eval profile --json` of a run; stores do not change after their fixture built them."""
    result = gym("eval", "profile", str(run_dir), "--json", *extra, cwd=run_dir.parent, check=True)
    return json.loads(result.stdout)


def _trajectory(prompt: str, answer: str, *, tools: bool) -> list[dict]:
    items: list[dict] = [{"type": "message", "role": "user", "content": prompt}]
    if tools:
        items += [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Think first. " + PAYLOAD}],
            },
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "calc<script>",
                "arguments": json.dumps({"expr": PAYLOAD}),
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "42 " + PAYLOAD},
            {
                "type": "function_call",
                "call_id": "call_2",
                "name": "calc",
                "arguments": '{"expr": "unterminated',
            },
        ]
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": answer}],
        }
    )
    return items


# Outcome per repeat of each constructed task: P pass, W wrong, F failed rollout,
# E verifier error, M missing.
CONSTRUCTED = ["PPPP", "PWPW", "WWWW", "FMPW", "EPPP", "PWMF"]


@pytest.fixture(scope="session")
def constructed_run(workdir: Path) -> Path:
    """Every outcome, hostile text everywhere a model, tool or dataset can put it, and a second
    verifier version under which task 1 and 2 change."""
    out = workdir / "constructed"
    plan = resolve(EvalConfig(benchmark="arithmetic-smoke", limit=6, repeats=4, out=str(out)))
    tasks = list(plan.all_tasks)
    tasks[5] = dataclasses.replace(tasks[5], task_id=EVIL_TASK, tags=("evil<i>tag</i>",))
    plan = dataclasses.replace(plan, all_tasks=tuple(tasks))
    con = connect(out, create=True)
    register_run(con, plan, resume=False)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rollouts, second = [], []
    for index, (task, codes) in enumerate(zip(plan.all_tasks, CONSTRUCTED, strict=True)):
        for repeat, code in enumerate(codes):
            if code == "M":
                continue
            rid = rollout_id(plan.run_id, task.task_id, repeat)
            answer = task.reference if code in "PE" else task.distractor + "\n" + PAYLOAD
            call = ModelCall(
                call_index=0,
                attempt=0,
                status="error" if code == "F" else "completed",
                failure_kind="server_error" if code == "F" else None,
                http_status=500 if code == "F" else 200,
                latency_s=0.05 * (1 + repeat),
                request={"input": PAYLOAD},
                response={"output": PAYLOAD},
                sampling=plan.sampling.model_dump(),
                input_tokens=40 + index,
                output_tokens=None if code == "F" else 10 + 3 * repeat,
                error="HTTP 500: " + PAYLOAD if code == "F" else None,
            )
            verification = None
            if code != "F":
                verification = Verification(
                    verifier_version=plan.verifier_version,
                    status=VERIFY_ERROR if code == "E" else VERIFIED,
                    reward=None if code == "E" else float(code == "P"),
                    passed=None if code == "E" else code == "P",
                    failure_kind="verifier_crashed" if code == "E" else None,
                    details={
                        "reason": "match" if code == "P" else "wrong_answer",
                        "extracted": PAYLOAD,
                    },
                )
            rollouts.append(
                Rollout(
                    rollout_id=rid,
                    run_id=plan.run_id,
                    task_id=task.task_id,
                    repeat_index=repeat,
                    seed=repeat,
                    status=FAILED if code == "F" else COMPLETED,
                    started_at=start,
                    finished_at=start + timedelta(seconds=0.05 * (1 + repeat)),
                    trajectory=_trajectory(plan.prompts[task.task_id], answer, tools=index == 1),
                    calls=[call],
                    output_text="" if code == "F" else answer,
                    failure_kind="server_error" if code == "F" else None,
                    error=call.error,
                    num_turns=1,
                    verification=verification,
                )
            )
            if code in "PW":
                # The second version flips task 1's wrong answers to passes and task 2's first.
                flipped = (index == 1 and code == "W") or (index == 2 and repeat == 0)
                passed = (code == "P") != flipped
                second.append(
                    (
                        rid,
                        "numeric_match@second",
                        VERIFIED,
                        float(passed),
                        passed,
                        None,
                        json.dumps({"reason": "reverified", "note": PAYLOAD}),
                        datetime.now(),
                    )
                )
    write_rollouts(con, rollouts)
    register_verifier_version(
        con,
        "numeric_match@second",
        "numeric_match",
        {"extract": "last_number", "note": PAYLOAD},
        source="reverify",
    )
    insert_rows(con, "verifications", second)
    con.close()
    return out


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def first_version(constructed_run: Path) -> str:
    """The verifier version the constructed run was collected under (before the reverify)."""
    con = connect(constructed_run, read_only=True)
    try:
        return con.execute(
            "SELECT verifier_version FROM verifier_versions WHERE source = 'gymflow'"
        ).fetchone()[0]
    finally:
        con.close()
