"""Every health check fires on a record built to fail it, and a clean run passes them all."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gymflow.analysis.health import Gate, health
from gymflow.analysis.health_checks import CHECKS, TASK_CHECK
from gymflow.core.records import Verification
from gymflow.core.statuses import FAILED
from gymflow.store.db import connect
from tests.analysis.builder import SAMPLING, RunMeta, StoreBuilder
from tests.conftest import gym_in_process as gym  # reads stored runs: no process needed


def _clean() -> StoreBuilder:
    b = StoreBuilder()
    for i, answer in enumerate((7, 12, 30)):
        b.task(f"t{i}", answer)
        b.fill(f"t{i}", "10")
    return b


def _run(b: StoreBuilder, tmp_path: Path, **kwargs) -> dict:
    b.write(tmp_path / "run")
    con = connect(tmp_path / "run", read_only=True)
    try:
        return health(con, **kwargs).as_json()
    finally:
        con.close()


def _tool_trajectory(*items: dict) -> list[dict]:
    return [{"type": "message", "role": "user", "content": "q"}, *items]


def _call(call_id: str, arguments: str = '{"x": 1}') -> dict:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": arguments}


def _output(call_id: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def _bend(b: StoreBuilder, task_id: str, repeat: int, **changes) -> str:
    """Replace the rollout (task_id, repeat) by one with `changes`; returns its rollout id."""
    b.rollouts = [r for r in b.rollouts if (r.task_id, r.repeat_index) != (task_id, repeat)]
    return b.rollout(task_id, repeat, **changes).rollout_id


def _executing(b: StoreBuilder) -> StoreBuilder:
    """A run whose harness executes function calls (single_turn's calls are its answer)."""
    b.meta.harness = "tool_loop"
    return b


def _with_call(b: StoreBuilder, task_id: str, repeat: int, **call_changes) -> str:
    rid = _bend(b, task_id, repeat)
    record = b.rollouts[-1]
    record.calls = [replace(record.calls[0], **call_changes)]
    return rid


def _missing(b):
    b.rollouts = [r for r in b.rollouts if (r.task_id, r.repeat_index) != ("t1", 1)]
    return "t1#1"


def _duplicate(b):
    b.rollout("t0", 0, rollout_id="another-id-same-key")
    return "another-id-same-key"


def _unknown_task(b):
    rid = _bend(b, "t0", 1)
    b.rollouts[-1].task_id = "ghost"
    return rid


def _last_call_failed(b):
    # 1 failed rollout among 46: below the failed share that makes a run unhealthy (5%)
    for i in range(3, 23):
        b.task(f"t{i}", i)
        b.fill(f"t{i}", "10")
    return _failed_rollout(b)


def _mostly_unanswered(b):
    """4 of 6 rollouts completed with no text and no call: the output-token limit spent on
    reasoning, which a 0 would misread as the policy's."""
    ids = [_bend(b, task, repeat, text="") for task, repeat in (("t0", 1), ("t1", 0), ("t1", 1))]
    ids.append(_bend(b, "t2", 0, text="", incomplete=True))
    return ids[0]


def _tools_never_called(b):
    """A run offering tools on every call, 12 rollouts, none of which called one."""
    for i in range(3, 6):
        b.task(f"t{i}", 40 + i)
        b.fill(f"t{i}", "10")
    for record in b.rollouts:
        record.calls = [
            replace(call, request={**call.request, "tools": [{"type": "function", "name": "f"}]})
            for call in record.calls
        ]
    return b.rollouts[0].rollout_id


_LOOP = "Let me go over the question once more before answering. " * 12


def _failed_rollout(b):
    rid = _with_call(
        b,
        "t0",
        1,
        status="error",
        failure_kind="rate_limited",
        http_status=429,
        input_tokens=None,
        output_tokens=None,
        response="rate limited",
    )
    record = b.rollouts[-1]
    record.status, record.failure_kind, record.verification = FAILED, "rate_limited", None
    return rid


def _token_counts_missing(b):
    return _with_call(b, "t0", 1, output_tokens=None)


def _token_mismatch(b):
    rid = _bend(b, "t0", 1)
    b.after_write.append(
        ("UPDATE rollouts SET output_tokens = output_tokens + 5 WHERE rollout_id = ?", [rid])
    )
    return rid


def _out_of_range(b):
    rid = _bend(b, "t0", 1)
    v = b.rollouts[-1].verification
    b.rollouts[-1].verification = replace(v, reward=2.0)
    return rid


def _verdict_disagrees(b):
    """A verdict flipped in the store, its reward left as judged."""
    rid = _bend(b, "t0", 1)
    v = b.rollouts[-1].verification
    b.rollouts[-1].verification = replace(v, passed=not v.passed)
    return rid


def _judge_failed(b: StoreBuilder, task_id: str, repeat: int) -> str:
    verification = Verification(b.verifier_version, "error", None, None, "judge_failed", {})
    return _bend(b, task_id, repeat, verification=verification)


def _verification_error(b):
    # 1 unjudged rollout among 46: below the failed share that makes a run unhealthy (5%)
    for i in range(3, 23):
        b.task(f"t{i}", i)
        b.fill(f"t{i}", "10")
    return _judge_failed(b, "t0", 1)


def _tampering(b):
    details = {"reason": "tampering", "tampering": ["ended_early:exit status 0"]}
    return _bend(
        b,
        "t0",
        1,
        verification=Verification(b.verifier_version, "ok", 0.0, False, "tampering", details),
    )


def _output_rewritten(b):
    """An output edited in the store after it was judged (and sealed): the verdict stays."""
    rid = _bend(b, "t0", 1)
    b.after_write.append(
        ("UPDATE rollouts SET output_text = 'Answer: 7' WHERE rollout_id = ?", [rid])
    )
    return rid


_UNSEALED = [
    ("ALTER TABLE verifications DROP COLUMN seal", []),
    ("DELETE FROM meta WHERE key = 'seal'", []),
]


def _before_the_seal(b):
    """A store an older gymflow wrote elsewhere: no seal column, no seal record."""
    b.after_write += _UNSEALED
    b.written_elsewhere = True
    return _bend(b, "t0", 1)


def _stripped(b):
    """The same edits made to a store this machine sealed, where it sealed it."""
    b.after_write += _UNSEALED
    return _bend(b, "t0", 1)


def _task_deleted(b):
    """A task taken out of the store with all it held: every other check agrees with the rest."""
    held = "(SELECT rollout_id FROM rollouts WHERE task_id = 't2')"
    b.after_write += [
        (f"DELETE FROM model_calls WHERE rollout_id IN {held}", []),
        (f"DELETE FROM verifications WHERE rollout_id IN {held}", []),
        ("DELETE FROM rollouts WHERE task_id = 't2'", []),
        ("DELETE FROM tasks WHERE task_id = 't2'", []),
    ]
    return b.meta.run_id


def _inputs_edited(b):
    """A task's reference answer edited in the file (the answer key): every verdict's seal still
    matches; the seal over the run's inputs does not (store/sealed_inputs.py)."""
    b.after_write.append(("UPDATE tasks SET reference = 'edited' WHERE task_id = 't0'", []))
    return b.meta.run_id


def _generation_put_back(b):
    """An older generation record put in the file (an older state's, or one copied from a newer
    state): every seal record still matches, the generation record does not hold over them
    (store/generations.py)."""
    edit = "UPDATE meta SET value = '1:' || repeat('0', 32) WHERE key = 'generation'"
    b.after_write.append((edit, []))
    return b.meta.run_id


def _rollout_edited(b):
    """One rollout's turn count edited in the file: no verdict's seal covers it; the seal over
    every rollout's identity and outcome does not match (store/sealed_rows.py)."""
    edit = "UPDATE rollouts SET num_turns = num_turns + 1 WHERE task_id = 't0' AND repeat_index = 1"
    b.after_write.append((edit, []))
    return b.meta.run_id


def _call_edited(b):
    """One model call's latency and cached tokens edited in the file: no other check reads
    them, no verdict's seal covers them; the seal over every model call does not match
    (store/sealed_rows.py)."""
    edit = (
        "UPDATE model_calls SET latency_s = 0.001, cached_tokens = 999 WHERE rollout_id IN "
        "(SELECT rollout_id FROM rollouts WHERE task_id = 't0' AND repeat_index = 1)"
    )
    b.after_write.append((edit, []))
    return b.meta.run_id


def _verdict_moved_aside(b):
    """One verdict moved, with its seal, where a reverify sets aside the verdicts it judges
    again (attack pass 7, s03): no verdict's seal shows an absence; the record of the verdict
    set does not match (store/sealed_rows.py)."""
    where = (
        "rollout_id IN (SELECT rollout_id FROM rollouts WHERE task_id = 't0' AND repeat_index = 1)"
    )
    b.after_write.append(
        (
            "INSERT INTO superseded_verifications "
            f"SELECT *, 1, now()::TIMESTAMP FROM verifications WHERE {where}",
            [],
        )
    )
    b.after_write.append((f"DELETE FROM verifications WHERE {where}", []))
    return b.meta.run_id


def _another_key(b):
    """A store sealed on a host with another key: its record names that key, and none of its
    seals is this key's (a record edited alone is checked by this key: tests/faults)."""
    b.after_write.append(("UPDATE meta SET value = 'ffffffffffffffff:0:00' WHERE key = 'seal'", []))
    b.after_write.append(("UPDATE verifications SET seal = left(md5(seal), 32)", []))
    b.written_elsewhere = True
    return _bend(b, "t0", 1)


def _every_repeat(b):
    _bend(b, "t2", 0, text="")
    _bend(b, "t2", 1, text="")
    return "t2"


def _identical_repeats(b):
    for task_id in ("t0", "t1", "t2"):
        _bend(b, task_id, 1)  # now right, word for word like repeat 0, at temperature 0.7
    return "t0"


def _refused_by_proxy(kind: str) -> Callable[[StoreBuilder], str]:
    """A call the recording proxy refused (`kind`) after the rollout's one answered call."""

    def mutate(b: StoreBuilder) -> str:
        rid = _bend(b, "t0", 1)
        record = b.rollouts[-1]
        refused = replace(
            record.calls[0], call_index=1, status="error", failure_kind=kind, http_status=401,
            response=None, input_tokens=None, cached_tokens=None, output_tokens=None,
            reasoning_tokens=None,
        )  # fmt: skip
        record.calls = [*record.calls, refused]
        return rid

    return mutate


def _text_without_call(b: StoreBuilder) -> str:
    """An external agent's trajectory claiming an answer no recorded call gave."""
    b.meta.harness = "command"
    rid = _bend(b, "t0", 1)
    record = b.rollouts[-1]
    said = [{"type": "output_text", "text": "All tests pass now."}]
    record.trajectory = [
        *record.trajectory,
        {"type": "message", "role": "assistant", "content": said},
    ]
    return rid


MUTATIONS: dict[str, Callable[[StoreBuilder], str]] = {
    "missing_rollout": _missing,
    "duplicate_identity": _duplicate,
    "unknown_task": _unknown_task,
    "no_model_calls": lambda b: _bend(b, "t0", 1, calls=[]),
    "last_call_failed": _last_call_failed,
    "failed_share": _failed_rollout,  # 1 of 6 rollouts failed
    "empty_output": lambda b: _bend(b, "t0", 1, text="  "),
    "no_answer_share": _mostly_unanswered,
    "incomplete_response": lambda b: _bend(b, "t0", 1, incomplete=True),
    "zero_output_tokens": lambda b: _bend(b, "t0", 1, output_tokens=0),
    "token_counts_missing": _token_counts_missing,
    "token_mismatch": _token_mismatch,
    "proxy_refused_calls": _refused_by_proxy("proxy_refused"),
    "calls_after_deadline": _refused_by_proxy("after_deadline"),
    "text_without_call": _text_without_call,
    "agent_calls_unrecorded": lambda b: _bend(b, "t0", 1, counters={"agent_logged_calls": 3}),
    "agent_log_refused": lambda b: _bend(b, "t0", 1, counters={"agent_logs_refused": 2}),
    "function_call_without_output": lambda b: _bend(
        _executing(b), "t0", 1, trajectory=_tool_trajectory(_call("c1"), _call("c2"), _output("c1"))
    ),
    "output_without_function_call": lambda b: _bend(
        b, "t0", 1, trajectory=_tool_trajectory(_call("c1"), _output("c1"), _output("c7"))
    ),
    "invalid_tool_arguments": lambda b: _bend(
        b, "t0", 1, trajectory=_tool_trajectory(_call("c1", '{"x": 1'), _output("c1"))
    ),
    "tool_server_error": lambda b: _bend(b, "t0", 1, counters={"tool_server_errors": 1}),
    "runaway_generation": lambda b: _bend(b, "t0", 1, text=_LOOP + "Let me go over the"),
    "tools_never_called": _tools_never_called,
    "sampling_mismatch": lambda b: _with_call(
        b, "t0", 1, sampling={"temperature": 1.0, "top_p": 1.0, "max_output_tokens": 256}
    ),
    "identical_repeats": _identical_repeats,
    "reward_out_of_range": _out_of_range,
    "verdict_disagrees": _verdict_disagrees,
    "verification_missing": lambda b: _bend(b, "t0", 1, verification=None),
    "verification_error": _verification_error,
    "tampering": _tampering,
    "seal_mismatch": _output_rewritten,
    "seal_stripped": _stripped,
    "task_list_edited": _task_deleted,
    "inputs_edited": _inputs_edited,
    "rollouts_edited": _rollout_edited,
    "calls_edited": _call_edited,
    "verdicts_edited": _verdict_moved_aside,
    "seal_rolled_back": _generation_put_back,
    "verdict_unsealed": _before_the_seal,
    "seal_key_unknown": _another_key,
    TASK_CHECK: _every_repeat,
}


def test_every_check_has_a_failing_record() -> None:
    assert set(MUTATIONS) == {*CHECKS, TASK_CHECK}


def test_a_function_call_is_an_answer_not_an_empty_output(tmp_path: Path) -> None:
    """BFCL's answers are calls with no text: not `empty_output`, and nothing unhealthy."""
    b = _clean()
    _bend(b, "t0", 1, text="", trajectory=_tool_trajectory(_call("c1")))
    result = _run(b, tmp_path)
    assert result["checks"]["empty_output"]["status"] == "ok"
    assert result["unhealthy_rollouts"] == 0


def test_runaway_is_repetition_not_the_token_limit(tmp_path: Path) -> None:
    """A varied answer that reached its output-token limit is incomplete, not a loop; a loop
    that stopped on its own, below the limit, is one."""
    b = _clean()
    varied = " ".join(f"step {i} adds {i * 7} to the total" for i in range(40))
    cut = _bend(b, "t0", 1, text=varied, output_tokens=256, incomplete=True)
    looped = _bend(b, "t1", 1, text=_LOOP)
    checks = _run(b, tmp_path)["checks"]
    assert checks["incomplete_response"]["examples"] == [cut]
    assert checks["runaway_generation"]["examples"] == [looped]


def test_tools_called_by_a_few_rollouts_are_not_ignored(tmp_path: Path) -> None:
    """One rollout of twelve calling a tool is a policy that rarely calls, not a server that
    ignores tools; 0 calls in 6 rollouts offered tools are too few to say at 1% (0.5^6), 0 in 8
    are not (0.5^8)."""
    b = _clean()
    _tools_never_called(b)
    caller = b.rollouts[0]
    _bend(b, caller.task_id, caller.repeat_index, trajectory=_tool_trajectory(_call("c1")))
    b.rollouts[-1].calls = [
        replace(call, request={**call.request, "tools": [{"type": "function", "name": "f"}]})
        for call in b.rollouts[-1].calls
    ]
    assert _run(b, tmp_path)["checks"]["tools_never_called"]["status"] == "ok"
    few = _clean()
    for record in few.rollouts:
        record.calls = [
            replace(call, request={**call.request, "tools": [{"type": "function", "name": "f"}]})
            for call in record.calls
        ]
    assert _run(few, tmp_path / "few")["checks"]["tools_never_called"]["status"] == "ok"


def test_single_turn_calls_are_answers_not_unanswered_calls(tmp_path: Path) -> None:
    """BFCL-style function calling: the calls are verified, never executed, so no output."""
    b = _clean()
    _bend(b, "t0", 1, trajectory=_tool_trajectory(_call("c1"), _call("c2")))
    assert _run(b, tmp_path)["checks"]["function_call_without_output"]["status"] == "ok"


def test_clean_run_passes_every_check(tmp_path: Path) -> None:
    result = _run(_clean(), tmp_path)
    assert result["verdict"] == "healthy" and result["gate"] == "pass"
    assert {c["status"] for c in result["checks"].values()} == {"ok"}
    assert result["rollouts"] == result["expected"] == 6
    assert result["rollout_verdicts"] == []
    assert result["reward_range"] == [0.0, 1.0]


def test_an_agents_text_its_calls_produced_passes(tmp_path: Path) -> None:
    """Under `command`, a trajectory whose every assistant text a recorded call answered (the
    clean run's) is not flagged; its own text in a string `content` is read too."""
    b = _clean()
    b.meta.harness = "command"
    record = b.rollouts[0]
    record.trajectory = [*record.trajectory[:-1], {**record.trajectory[-1],
                         "content": record.output_text}]  # fmt: skip
    result = _run(b, tmp_path)
    assert result["checks"]["text_without_call"]["status"] == "ok", result["checks"]


@pytest.mark.parametrize("check", sorted(MUTATIONS))
def test_check_fires_on_its_record(check: str, tmp_path: Path) -> None:
    b = _clean()
    flagged = MUTATIONS[check](b)
    result = _run(b, tmp_path)
    entry = result["checks"][check]
    assert entry["status"] == "failed", entry
    assert flagged in entry["examples"]
    if entry["severity"] == "integrity":
        assert result["verdict"] == "unhealthy"
        assert result["gate"] == "fail" and check in result["gate_failures"]
    else:
        # sound records showing behaviour to look at: a warning, not a broken run
        assert check in result["warnings"]
        assert result["gate"] == "pass"
        strict = _run(b, tmp_path / "strict", gate=Gate(warning_max_share=0.0))
        assert strict["gate"] == "fail" and check in strict["gate_failures"]
    if entry["level"] == "rollout":
        verdict = {v["rollout_id"]: v["checks"] for v in result["rollout_verdicts"]}
        assert check in verdict[flagged]


def test_identity_checks_look_past_their_shortcuts(tmp_path: Path) -> None:
    """`missing_rollout` and `duplicate_identity` skip the tasks holding each expected repeat
    once, and the rollouts with one model call: what the shortcuts could hide is still found.
    A repeat index outside the run's repeats (here 2, twice, in a run of 2) hides a missing one
    from a count; a call repeated under a rollout id no rollout has is in no rollout's count."""
    b = _clean()
    b.rollouts = [r for r in b.rollouts if (r.task_id, r.repeat_index) != ("t1", 1)]
    b.rollout("t1", 2, rollout_id="t1-out-of-range")
    b.rollout("t2", 2, rollout_id="t2-out-a")
    b.rollout("t2", 2, rollout_id="t2-out-b")
    stray = (
        "INSERT INTO model_calls SELECT * REPLACE ('no-such-rollout' AS rollout_id) "
        "FROM (SELECT * FROM model_calls LIMIT 1)"
    )
    b.after_write += [
        (stray, []),
        (stray, []),
        ("INSERT INTO model_calls SELECT * FROM model_calls WHERE rollout_id = 't2-out-a'", []),
    ]
    checks = _run(b, tmp_path)["checks"]
    assert checks["missing_rollout"]["examples"] == ["t1#1"]
    assert checks["duplicate_identity"]["examples"] == ["no-such-rollout", "t2-out-a", "t2-out-b"]


def test_gate_thresholds(tmp_path: Path) -> None:
    b = _clean()
    _bend(b, "t0", 1, incomplete=True)  # 1 of 6 rollouts
    result = _run(b, tmp_path, gate=Gate(per_check={"incomplete_response": 0.2}))
    assert result["warnings"] == ["incomplete_response"]  # a check fired ...
    assert result["gate"] == "pass"  # ... but within its threshold
    assert result["checks"]["incomplete_response"]["share"] == pytest.approx(1 / 6)
    tight = _run(b, tmp_path / "tight", gate=Gate(per_check={"incomplete_response": 0.1}))
    assert tight["gate"] == "fail" and tight["gate_failures"] == ["incomplete_response"]
    with pytest.raises(ValueError, match="no health check named nope"):
        _run(b, tmp_path / "again", gate=Gate(per_check={"nope": 0.1}))


def test_health_cli_exit_code_and_json(tmp_path: Path) -> None:
    b = _clean()
    flagged = _bend(b, "t0", 1, incomplete=True)
    b.write(tmp_path / "run")
    warned = gym("eval", "health", "run", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "warnings: incomplete_response" in warned.stdout
    failed = gym("eval", "health", "run", "--json", "--warning-max-share", "0", cwd=tmp_path)
    assert failed.returncode == 2, failed.stderr  # exit_codes.GATE_FAILED
    payload = json.loads(failed.stdout)
    assert payload["gate_failures"] == ["incomplete_response"]
    assert payload["rollout_verdicts"][0]["rollout_id"] == flagged
    passed = gym("eval", "health", "run", "--threshold", "incomplete_response=0.5", cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "incomplete_response" in passed.stdout


def test_identical_repeats_needs_every_task_identical_and_a_temperature(tmp_path: Path) -> None:
    b = _clean()
    _identical_repeats(b)
    _bend(b, "t2", 1, correct=False)  # one task's repeats differ: sampling did something
    assert _run(b, tmp_path / "varied")["checks"]["identical_repeats"]["count"] == 0
    greedy = StoreBuilder(RunMeta(sampling={**SAMPLING, "temperature": 0.0}))
    for i, answer in enumerate((7, 12, 30)):
        greedy.task(f"t{i}", answer)
        greedy.fill(f"t{i}", "11")  # identical repeats, as greedy decoding gives
    assert _run(greedy, tmp_path / "greedy")["checks"]["identical_repeats"]["count"] == 0


def _failing_run(path: Path) -> Path:
    """Six expected rollouts, two failed (33%): beyond failed_share's default 5%."""
    b = _clean()
    for record in b.rollouts:
        if record.task_id == "t0":
            record.status, record.failure_kind, record.verification = FAILED, "server_error", None
    return b.write(path)


def test_a_run_whose_verifier_mostly_failed_is_unhealthy(tmp_path: Path) -> None:
    """Every rollout completed but the verifier (a judge, a sandbox) judged one of six: pass@1
    rests on that one, which is no measure of the policy, as when the model mostly failed."""
    b = _clean()
    for task_id, repeat in (("t0", 1), ("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)):
        _judge_failed(b, task_id, repeat)
    b.write(tmp_path / "run")
    result = gym("eval", "health", "run", "--json", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    assert payload["verdict"] == "unhealthy" and "failed_share" in payload["gate_failures"]
    assert payload["checks"]["failed_share"]["count"] == 5


def test_the_verdict_reads_the_gates_thresholds(tmp_path: Path) -> None:
    _failing_run(tmp_path / "run")
    strict = gym("eval", "health", "run", "--json", cwd=tmp_path)
    assert strict.returncode == 2, strict.stderr
    payload = json.loads(strict.stdout)
    assert payload["verdict"] == "unhealthy" and payload["gate_failures"] == ["failed_share"]
    assert payload["checks"]["failed_share"]["threshold"] == 0.05
    # allowed more failures: neither the gate nor the verdict holds them against the run
    allowed = gym(
        "eval", "health", "run", "--json", "--threshold", "failed_share=0.5", cwd=tmp_path
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    payload = json.loads(allowed.stdout)
    assert payload["verdict"] == "healthy" and payload["gate"] == "pass"
    assert payload["checks"]["failed_share"]["count"] == 0

    # an integrity check within its allowance is a warning, not an unhealthy verdict
    b = _clean()
    _missing(b)  # 1 of 6 expected rollouts
    con = connect(b.write(tmp_path / "missing"), read_only=True)
    try:
        within = health(con, gate=Gate(max_share=0.2))
        beyond = health(con, gate=Gate(max_share=0.1))
    finally:
        con.close()
    assert within.failing_checks == ["missing_rollout"] == within.warnings
    assert within.verdict == "healthy" and within.gate == "pass"
    assert beyond.verdict == "unhealthy" and beyond.broken == beyond.gate_failures


def test_tools_never_called_is_a_test_with_a_stated_error_rate(tmp_path: Path) -> None:
    """0 calls in 8 rollouts offered tools: a policy calling on half its rollouts makes none
    with probability 0.5^8 = 0.4%, under the test's 1%: flagged, however small the run."""
    b = _clean()
    b.task("t3", 43)
    b.fill("t3", "10")
    for record in b.rollouts:
        record.calls = [
            replace(call, request={**call.request, "tools": [{"type": "function", "name": "f"}]})
            for call in record.calls
        ]
    check = _run(b, tmp_path)["checks"]["tools_never_called"]
    assert check["status"] == "failed" and check["count"] == 8


def test_a_loop_of_short_lines_is_runaway(tmp_path: Path) -> None:
    """Gemma 3 270M base's '<number>' sixteen times, one a line: eight words of which a
    word-count check saw too few; one line making up the output is a loop."""
    b = _clean()
    looped = _bend(b, "t0", 1, text="<number>\n" * 16)
    listed = _bend(b, "t1", 1, text="1. add 3\n2. add 4\n3. add 5\nAnswer: 12")
    checks = _run(b, tmp_path)["checks"]
    assert checks["runaway_generation"]["examples"] == [looped]
    assert listed not in checks["runaway_generation"]["examples"]
