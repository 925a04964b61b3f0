"""Runs to report on, built once per session: one real `gym eval run` with injected server errors
and no retries (some rollouts fail), and stores built with the store's own writers: a clean run on
the same protocol, and one that holds every outcome, hostile strings and a second verifier
version."""

from __future__ import annotations

import dataclasses
import functools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gymflow.core.config import EvalConfig
from gymflow.core.records import ModelCall, Rollout, Verification, rollout_id
from gymflow.core.statuses import COMPLETED, FAILED, VERIFIED, VERIFY_ERROR
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.store.db import connect
from gymflow.store.verdict_message import SEALED_ROLLOUT
from gymflow.store.verifier_versions import make_current
from gymflow.store.writer import insert_verdicts, register_verifier_version, write_rollouts
from tests.analysis.builder import reseal
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
def eval_run(workdir: Path, prefect_api: str) -> Path:
    """A real `gym eval run` through Prefect, with injected server errors and no retries, so
    some rollouts fail; it writes its own report at the end."""
    (workdir / "faulty.yaml").write_text(FAULTY_CONFIG)
    run = gym("eval", "run", "faulty.yaml", cwd=workdir, env={"PREFECT_API_URL": prefect_api})
    # A quarter of the rollouts fail, more than health allows (5%): the gate fails, exit 2.
    assert run.returncode == 2, run.stdout + run.stderr
    assert "health: unhealthy" in run.stdout, run.stdout
    return workdir / "faulty"


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
# A clean run on the protocol of the `gym eval run` below (so the two can be compared).
CLEAN = ["PPP", "PWP", "WWW", "PPW", "PPP", "WPW", "PPP", "WWP", "PPP", "WWW"]
SECOND = "numeric_match@second"


def build_store(out: Path, outcomes: list[str], *, hostile: bool) -> Path:
    """A run store written by the store's own writers, with the given outcome per repeat.

    `hostile` puts attack strings in a task id, a tag, outputs, tool calls, tool outputs,
    reasoning, errors and verifier details, and adds a second verifier version under which
    task 1's wrong answers and task 2's first repeat pass."""
    repeats = len(outcomes[0])
    plan = resolve(
        EvalConfig(benchmark="arithmetic-smoke", limit=len(outcomes), repeats=repeats, out=str(out))
    )
    if hostile:
        tasks = list(plan.all_tasks)
        prompt = plan.prompts[tasks[5].task_id]  # rendered with the plan: the same inputs
        tasks[5] = dataclasses.replace(tasks[5], task_id=EVIL_TASK, tags=("evil<i>tag</i>",))
        plan = dataclasses.replace(
            plan, all_tasks=tuple(tasks), prompts={**plan.prompts, EVIL_TASK: prompt}
        )
    noise = PAYLOAD if hostile else ""
    con = connect(out, create=True)
    register_run(con, plan, resume=False)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rollouts, second = [], []
    for index, (task, codes) in enumerate(zip(plan.all_tasks, outcomes, strict=True)):
        for repeat, code in enumerate(codes):
            if code == "M":
                continue
            rid = rollout_id(plan.run_id, task.task_id, repeat)
            answer = task.reference if code in "PE" else task.distractor + "\n" + noise
            call = ModelCall(
                call_index=0,
                attempt=0,
                status="error" if code == "F" else "completed",
                failure_kind="server_error" if code == "F" else None,
                http_status=500 if code == "F" else 200,
                latency_s=0.05 * (1 + repeat),
                request={"input": noise},
                response={"output": noise},
                sampling=plan.sampling.model_dump(),
                input_tokens=40 + index,
                output_tokens=None if code == "F" else 10 + 3 * repeat,
                error="HTTP 500: " + noise if code == "F" else None,
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
                        "extracted": noise,
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
                    trajectory=_trajectory(
                        plan.prompts[task.task_id], answer, tools=hostile and index == 1
                    ),
                    calls=[call],
                    output_text="" if code == "F" else answer,
                    failure_kind="server_error" if code == "F" else None,
                    error=call.error,
                    num_turns=1,
                    verification=verification,
                )
            )
            if hostile and code in "PW":
                flipped = (index == 1 and code == "W") or (index == 2 and repeat == 0)
                passed = (code == "P") != flipped
                details = json.dumps({"reason": "reverified", "note": PAYLOAD})
                second.append(
                    (rid, SECOND, VERIFIED, float(passed), passed, None, details, datetime.now())
                )
    write_rollouts(con, rollouts)
    if hostile:
        register_verifier_version(
            con,
            SECOND,
            "numeric_match",
            {"extract": "last_number", "note": PAYLOAD},
            source="reverify",
        )
        judged = {
            row[0]: row[1:]
            for row in con.execute(
                f"SELECT rollout_id, {', '.join(SEALED_ROLLOUT)} FROM rollouts"
            ).fetchall()
        }
        insert_verdicts(con, second, [judged[row[0]] for row in second])
        reseal(con)  # the version registered here, sealed as reverify's writer seals it
        make_current(con, SECOND)  # the run is read under its reverified version
    con.close()
    return out


@pytest.fixture(scope="session")
def constructed_run(workdir: Path) -> Path:
    """Every outcome, hostile text everywhere it can come from, and a reverify."""
    return build_store(workdir / "constructed", CONSTRUCTED, hostile=True)


@pytest.fixture(scope="session")
def clean_run(workdir: Path) -> Path:
    return build_store(workdir / "clean", CLEAN, hostile=False)


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
