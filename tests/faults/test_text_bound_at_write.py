"""The text bound at the write (issue 42): every open refuses a store holding a text value past
`MAX_TEXT_BYTES` (64 MiB), and a multi-turn rollout's last request (the whole conversation) or
trajectory can pass it; gymflow wrote such a store and then refused it on its next read. Now the
writer stores such a rollout as the failure it is (`failed`, `record_too_large`: left out of every
score, never a reward of 0), its call's oversized request NULL, and the store opens, sealed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gymflow.core.config import MAX_TEXT_BYTES, EvalConfig
from gymflow.core.records import ModelCall, Rollout, Verification, rollout_id
from gymflow.rollouts.collect import run_collect
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.simulated.endpoint import local_policy_server
from gymflow.store.db import connect
from gymflow.store.rows import dumps
from gymflow.store.writer import write_rollouts
from tests.conftest import gym_in_process as gym
from tests.faults.stores import query


def _long_conversation() -> str:
    """A conversation that grew past the bound by its last turn, in fewer characters than the
    bound (one of every 8 is 3 UTF-8 bytes: the bound is in bytes)."""
    return "turn...\u2603" * (MAX_TEXT_BYTES // 10 + 1)


def _numbers(run: Path, cwd: Path) -> dict:
    checked = gym("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd)
    assert checked.stdout, checked.stderr
    health = json.loads(checked.stdout)
    done = gym("eval", "profile", str(run), "--json", cwd=cwd)
    assert done.stdout, done.stderr
    profile = json.loads(done.stdout)
    return {
        "codes": (checked.returncode, done.returncode),
        "gate": sorted(health["gate_failures"]),
        "counts": {name: check["count"] for name, check in health["checks"].items()},
        "seals": profile.pop("seals"),
        "profile": profile,
    }


def test_a_rollout_past_the_text_bound_is_stored_as_a_failure_and_the_store_opens(
    tmp_path: Path,
) -> None:
    """A run of 6 tasks x 2 repeats, one rollout not yet written; then that rollout, judged as
    passed, whose last call's request holds more than 64 MiB. Stored: failed,
    `record_too_large`, its error naming the call, field and size, no verdict, its call with
    the request NULL; every read opens it, its seals match, and every score is as before (the
    failure left out), coverage counting one failed where one was missing."""
    plan = resolve(
        EvalConfig.model_validate(
            {
                "benchmark": "arithmetic-smoke",
                "limit": 6,
                "repeats": 2,
                "out": str(tmp_path / "run"),
            }
        )
    )
    keys = list(plan.keys())
    task_id, repeat_index = last = keys[-1]
    con = connect(plan.run_dir, create=True)
    try:
        register_run(con, plan, resume=False)
        with local_policy_server(plan) as server:
            run_collect(plan, [key for key in keys if key != last], con, base_url=server.base_url)
    finally:
        con.close()
    run = plan.run_dir
    before = _numbers(run, tmp_path)
    # one rollout missing: an integrity failure of health, not of the profile
    assert before["codes"] == (2, 0) and before["gate"] == ["missing_rollout"], before["gate"]
    assert before["profile"]["coverage"]["missing"] == 1
    assert before["seals"]["intact"] is True
    ((run_id, version),) = query(
        run / "gymflow.duckdb", "SELECT run_id, verifier_version FROM runs"
    )
    # what every call of the run sent (a call that sent other sampling is `sampling_mismatch`)
    ((sampling,),) = query(
        run / "gymflow.duckdb", "SELECT any_value(sampling_json) FROM model_calls"
    )

    started = datetime.now(UTC)
    request = {"model": "m", "input": [{"role": "user", "content": _long_conversation()}]}
    sent = json.loads(sampling)
    call = ModelCall(0, 1, "completed", None, 200, 0.5, request, {"output": []}, sent,
                     input_tokens=10, output_tokens=2)  # fmt: skip
    rollout = Rollout(
        rollout_id=rollout_id(run_id, task_id, repeat_index),
        run_id=run_id,
        task_id=task_id,
        repeat_index=repeat_index,
        seed=1,
        status="completed",
        started_at=started,
        finished_at=started + timedelta(seconds=1),
        trajectory=[{"type": "message", "role": "assistant", "content": "42"}],
        calls=[call],
        output_text="42",
        num_turns=1,
        verification=Verification(version, "ok", 1.0, True),
    )
    con = connect(run)
    try:
        assert write_rollouts(con, [rollout]) == 1
    finally:
        con.close()

    store = run / "gymflow.duckdb"
    ((status, kind, error, output),) = query(
        store,
        "SELECT status, failure_kind, error, output_text FROM rollouts WHERE rollout_id = ?",
        [rollout.rollout_id],
    )
    assert (status, kind, output) == ("failed", "record_too_large", "42")
    size = len(dumps(request).encode())
    assert size > MAX_TEXT_BYTES and len(request["input"][0]["content"]) < MAX_TEXT_BYTES
    assert error.startswith(
        f"model_calls.request_json of call 0 (attempt 1): {size:,} bytes of text, past the "
        f"{MAX_TEXT_BYTES:,} gymflow stores in one value; the rollout is recorded as failed"
    ), error[:300]
    assert query(store, "SELECT count(*) FROM verifications WHERE rollout_id = ?",
                 [rollout.rollout_id]) == [(0,)]  # fmt: skip
    assert query(
        store,
        "SELECT request_json IS NULL, response_json, input_tokens FROM model_calls "
        "WHERE rollout_id = ?",
        [rollout.rollout_id],
    ) == [(True, '{"output":[]}', 10)]

    after = _numbers(run, tmp_path)
    assert after["seals"]["intact"] is True and after["counts"]["calls_edited"] == 0
    # one failed rollout of 12 passes the failed-share bound (5%): what it is, nothing else
    assert after["codes"] == (2, 0) and after["gate"] == ["failed_share"], after["gate"]
    for score in ("pass@1", "pass@k", "pass^k", "ci95", "tasks_scored"):
        assert after["profile"][score] == before["profile"][score], score
    coverage = before["profile"]["coverage"]
    assert after["profile"]["coverage"] == {
        **coverage, "failed": coverage["failed"] + 1, "missing": coverage["missing"] - 1
    }  # fmt: skip
    assert after["counts"]["missing_rollout"] == before["counts"]["missing_rollout"] - 1
    diagnosed = gym("eval", "diagnose", str(run), "--json", cwd=tmp_path)
    assert diagnosed.returncode in (0, 2) and "record_too_large" in diagnosed.stdout


def test_the_bound_is_in_bytes_and_only_oversized_values_are_left_out() -> None:
    """`text_bound` on its own: text of the bound in bytes is kept, one byte more is not (in
    characters far fewer); a call row keeps every value within it."""
    from gymflow.store.text_bound import text_bytes_over, without_oversized

    assert text_bytes_over("a" * MAX_TEXT_BYTES) is None
    assert text_bytes_over("a" * (MAX_TEXT_BYTES + 1)) == MAX_TEXT_BYTES + 1
    snowmen = "\u2603" * (MAX_TEXT_BYTES // 3 + 1)  # a third as many characters, 3 bytes each
    assert text_bytes_over(snowmen) == len(snowmen) * 3
    assert without_oversized(("r", 0, snowmen, "ok", None)) == ("r", 0, None, "ok", None)
