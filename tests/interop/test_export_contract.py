"""`gym export --format nemo-gym` lines hold what NeMo Gym 0.4.0's typed models require (checked
against the models themselves by bench/nemo_gym_contract.py; these are the facts it showed, so
CI covers them without nemo-gym installed), and a round trip keeps every count and reward."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from gymflow.interop.nemo_gym import import_rollouts
from gymflow.models.nemo_gym_shapes import REQUEST_FIELDS
from tests.conftest import gym_in_process as gym  # exports of stored runs: no process needed
from tests.faults.stores import resealed
from tests.interop.test_real_files import DATA, _query

#: Top-level numbers NeMo Gym's reward profiler averages as metrics: nothing else may be one.
METRICS = {"reward", "_ng_task_index", "_ng_rollout_index"}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_request(params: dict) -> None:
    assert set(params) <= set(REQUEST_FIELDS), set(params) - set(REQUEST_FIELDS)  # no `seed`
    assert isinstance(params["input"], list) and params["input"]
    assert isinstance(params["parallel_tool_calls"], bool)
    assert params["tool_choice"] in ("auto", "none", "required") or isinstance(
        params["tool_choice"], dict
    )
    for tool in params["tools"]:
        if tool["type"] == "function":
            assert isinstance(tool["name"], str) and isinstance(tool["parameters"], dict)
            assert isinstance(tool["strict"], bool)


def _check_item(item: dict) -> None:
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") == "assistant":
        assert isinstance(item["id"], str) and item["status"] in ("completed", "incomplete")
        for part in item["content"]:
            assert part["type"] in ("output_text", "refusal")
            if part["type"] == "output_text":
                assert isinstance(part["text"], str) and isinstance(part["annotations"], list)
    elif kind == "function_call":
        assert all(isinstance(item[k], str) for k in ("arguments", "call_id", "name"))
    elif kind == "function_call_output":
        assert isinstance(item["call_id"], str) and isinstance(item["output"], str)
    elif kind == "reasoning":
        assert isinstance(item["id"], str) and isinstance(item["summary"], list)


def _check_response(response: dict) -> None:
    assert isinstance(response["id"], str) and response["object"] == "response"
    assert isinstance(response["created_at"], float) and isinstance(response["model"], str)
    assert isinstance(response["parallel_tool_calls"], bool)
    assert isinstance(response["tools"], list) and "tool_choice" in response
    for item in response["output"]:
        _check_item(item)
    usage = response["usage"]
    if usage is not None:
        assert all(_is_int(usage[k]) for k in ("input_tokens", "output_tokens", "total_tokens"))
        assert _is_int(usage["input_tokens_details"]["cached_tokens"])
        assert _is_int(usage["output_tokens_details"]["reasoning_tokens"])


def _edited(store: Path, sql: str) -> None:
    """`sql` run on the store, its verdicts then sealed again with this machine's key, as the
    writer that stored that state would have sealed it: an export refuses a store whose seals
    do not match (store/sealed_first.py)."""
    con = duckdb.connect(str(store))
    try:
        con.execute(sql)
    finally:
        con.close()
    resealed(store)


def test_exported_lines_fit_nemo_gyms_models_and_round_trip(tmp_path: Path) -> None:
    lines = (DATA / "blackjack" / "example_rollouts.jsonl").read_text().splitlines()
    failed = json.loads(lines[4])
    failed["_ng_failure_class"] = "legitimate"
    (tmp_path / "r.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (tmp_path / "r_failures.jsonl").write_text(json.dumps(failed) + "\n")
    import_rollouts(tmp_path / "r.jsonl", tmp_path / "run")
    # one completed rollout whose grading timed out: failed sidecar, still completed on return
    _edited(
        tmp_path / "run" / "gymflow.duckdb",
        "UPDATE verifications SET status = 'error', reward = NULL, passed = NULL, "
        "failure_kind = 'verifier_timeout' WHERE rollout_id = (SELECT rollout_id FROM rollouts "
        "WHERE repeat_index = 3)",
    )
    out = gym("export", "run", "--format", "nemo-gym", "--out", "ng/x.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ng = tmp_path / "ng"
    rollouts, failures, inputs = (
        [json.loads(line) for line in (ng / name).read_text().splitlines()]
        for name in ("x.jsonl", "x_failures.jsonl", "x_materialized_inputs.jsonl")
    )
    assert (len(rollouts), len(failures), len(inputs)) == (3, 2, 5)
    for row in rollouts:
        _check_request(row["responses_create_params"])
        _check_response(row["response"])
        assert isinstance(row["reward"], float)
        assert row["agent_ref"] == json.loads(lines[0])["agent_ref"]  # kept from the import
        numbers = {k for k, v in row.items() if isinstance(v, int | float)}
        assert numbers == METRICS, numbers  # task fields under `task`, not as metrics
    graded, failure = failures
    assert (
        graded["_ng_failure_class"] == "transient" and graded["response"]["status"] == "completed"
    )
    assert graded["gymflow_failure_kind"] == "verifier_timeout"
    assert failure["_ng_failure_class"] == "legitimate" and "reward" not in failure
    assert failure["response"]["status"] == "failed"
    assert failure["response"]["error"]["code"] == "server_error"
    for row in failures:
        _check_response(row["response"])
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in inputs) == [
        (0, i) for i in range(5)
    ]
    for row in inputs:
        _check_request(row["responses_create_params"])
    back = import_rollouts(ng / "x.jsonl", tmp_path / "back")
    assert (back["rollouts"], back["failed"], back["tasks"]) == (5, 1, 1)
    counts = (
        "SELECT r.status, v.status, v.failure_kind, count(*), sum(v.reward) FROM rollouts r "
        "LEFT JOIN verifications v USING (rollout_id) GROUP BY ALL ORDER BY ALL"
    )
    assert _query(tmp_path / "back", counts) == _query(tmp_path / "run", counts)


def test_a_non_finite_stored_reward_never_reaches_an_export_as_nan(tmp_path: Path) -> None:
    import_rollouts(DATA / "blackjack" / "example_rollouts.jsonl", tmp_path / "run")
    _edited(tmp_path / "run" / "gymflow.duckdb",
            "UPDATE verifications SET reward = 'nan'::DOUBLE WHERE rollout_id = "
            "(SELECT rollout_id FROM rollouts WHERE repeat_index = 0)")  # fmt: skip

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    for fmt, name in (("jsonl", "flat.jsonl"), ("nemo-gym", "ng.jsonl")):
        gym("export", "run", "--format", fmt, "--out", name, cwd=tmp_path, check=True)
        for line in (tmp_path / name).read_text().splitlines():
            json.loads(line, parse_constant=refuse)
    failures = (tmp_path / "ng_failures.jsonl").read_text().splitlines()
    assert [json.loads(line)["gymflow_failure_kind"] for line in failures] == ["non_finite_reward"]


def test_a_request_is_shaped_to_nemo_gyms_request_model() -> None:
    from gymflow.models.nemo_gym_shapes import nemo_request

    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    shaped = nemo_request(
        {"input": "hi", "seed": 3, "metadata": {"seed": 7}, "tools": [tool], "stream_x": 1}
    )
    _check_request(shaped)
    assert shaped["input"] == [{"role": "user", "content": "hi"}]
    assert shaped["metadata"] == {"seed": "7"}  # the API's metadata maps text to text
    assert shaped["tools"][0]["strict"] is False
