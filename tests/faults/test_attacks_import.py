"""Hostile NeMo Gym lines the importer's first hardening missed: each was a raw traceback (or a
silently scored rollout) and is now one problem naming the file, line and field, with nothing
stored."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
from pathlib import Path

import duckdb
import pytest

from gymflow.interop.nemo_gym import import_rollouts
from gymflow.interop.nemo_read import InteropError
from gymflow.store.db import store_path
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym, gym_in_process

GOOD = {
    "responses_create_params": {
        "input": [{"type": "message", "role": "user", "content": "What is 2 + 2?"}]
    },
    "response": {
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "4"}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
    "reward": 1.0,
    "_ng_task_index": 0,
    "_ng_rollout_index": 0,
}


def _edited(edit) -> str:
    row = copy.deepcopy(GOOD)
    edit(row)
    return json.dumps(row)


def _nested(depth: int) -> str:
    return json.dumps(GOOD)[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"


HOSTILE = {
    # Python refuses to read integers past 4,300 digits: a ValueError, not a JSONDecodeError
    "long integer reward": (
        json.dumps(GOOD).replace('"reward": 1.0', '"reward": ' + "9" * 5000),
        "r.jsonl:1: not JSON: an integer too long",
    ),
    "long integer index": (
        json.dumps(GOOD).replace('"_ng_task_index": 0', '"_ng_task_index": ' + "9" * 5000),
        "r.jsonl:1: not JSON: an integer too long",
    ),
    # JSON allows a lone surrogate escape; UTF-8 (and so the store) does not
    "lone surrogate": (
        json.dumps(GOOD).replace("What is", "\\ud800 What is"),
        "r.jsonl:1: responses_create_params.input[0].content: text with a lone surrogate",
    ),
    "lone surrogate in an error": (
        _edited(lambda r: r["response"].update(error={"message": "X"})).replace('"X"', '"\\udfff"'),
        "r.jsonl:1: response.error.message: text with a lone surrogate",
    ),
    # deep enough to parse, too deep for every recursive walk after it
    "nesting of 900": (_nested(900), "r.jsonl:1: extra"),
    "usage detail as text": (
        _edited(
            lambda r: r["response"]["usage"].update(input_tokens_details={"cached_tokens": "x"})
        ),
        "r.jsonl:1: response.usage.input_tokens_details.cached_tokens: expected a token count",
    ),
    "usage detail past int64": (
        _edited(
            lambda r: r["response"]["usage"].update(
                output_tokens_details={"reasoning_tokens": 10**30}
            )
        ),
        "r.jsonl:1: response.usage.output_tokens_details.reasoning_tokens: expected a token count",
    ),
    "chat usage detail as text": (
        _edited(
            lambda r: r["response"].update(
                usage={"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": "zz"}}
            )
        ),
        "r.jsonl:1: response.usage.prompt_tokens_details.cached_tokens: expected a token count",
    ),
    # which reward? Python keeps the last (0.0 was imported), other readers the first
    "reward given twice": (
        json.dumps(GOOD)[:-1] + ', "reward": 0.0}',
        "r.jsonl:1: reward: given more than once in one object",
    ),
    "a nested key given twice": (
        json.dumps(GOOD).replace(
            '"status": "completed"', '"status": "failed", "status": "completed"'
        ),
        "r.jsonl:1: response.status: given more than once in one object",
    ),
    # an unknown status would be scored as a completed answer
    "unknown response status": (
        _edited(lambda r: r["response"].update(status="weird")),
        'r.jsonl:1: response.status: "weird" is not a Responses status',
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_line_is_one_named_problem_and_nothing_is_stored(tmp_path: Path, name: str) -> None:
    line, expected = HOSTILE[name]
    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    assert expected in str(caught.value)
    assert len(str(caught.value)) < 1000, "the message must stay readable"
    assert not store_path(tmp_path / "run").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_a_failures_line_without_its_class_is_not_scored(tmp_path: Path) -> None:
    """A line in `_failures.jsonl` is a failed attempt; without `_ng_failure_class` it used to be
    imported as a completed, scored rollout (its reward 1.0 counted as a pass)."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    failure = _edited(lambda r: r.update(_ng_rollout_index=1))
    (tmp_path / "r_failures.jsonl").write_text(failure + "\n")
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    assert "r_failures.jsonl:1: _ng_failure_class: missing" in str(caught.value)
    assert not store_path(tmp_path / "run").exists()


def test_null_text_parts_import_without_a_traceback(tmp_path: Path) -> None:
    """`"text": null` / `"refusal": null` parts (what SDK dumps write) were a TypeError."""
    path = tmp_path / "r.jsonl"
    path.write_text(
        _edited(
            lambda r: r["response"]["output"][0].update(
                content=[
                    {"type": "output_text", "text": None},
                    {"type": "refusal", "refusal": None},
                ]
            )
        )
        + "\n"
    )
    result = import_rollouts(path, tmp_path / "run")
    assert result["failed"] == 1  # the refusal part makes it a refused rollout, not a score


def test_the_cli_names_the_line_for_a_surrogate(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(HOSTILE["lone surrogate"][0] + "\n")
    # a process: its stderr is an encoded pipe, where a surrogate in the message would fail
    out = gym("import", "nemo-gym", str(path), "--out", "run", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "r.jsonl:1: responses_create_params.input[0].content" in " ".join(out.stderr.split())
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("threshold", [float("nan"), float("-inf"), float("inf")])
def test_a_non_finite_pass_threshold_is_refused(tmp_path: Path, threshold: float) -> None:
    """`--pass-threshold nan` failed every rollout (reward >= NaN is false) and `-inf` passed
    every one, silently."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(InteropError, match=r"--pass-threshold: .* is not a finite number"):
        import_rollouts(path, tmp_path / "run", pass_threshold=threshold)
    assert not (tmp_path / "run").exists()


def test_a_materialized_input_of_another_task_is_refused(tmp_path: Path) -> None:
    """The task's prompt is taken from `_materialized_inputs.jsonl`: a sidecar from another
    file silently relabelled every rollout with another question."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    other = {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 3 + 3?"}]},
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
    }
    (tmp_path / "r_materialized_inputs.jsonl").write_text(json.dumps(other) + "\n")
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    assert "r.jsonl:1: responses_create_params.input: its user message is not that of task 0" in (
        str(caught.value)
    )
    assert not store_path(tmp_path / "run").exists()


def test_special_files_are_refused_not_read_forever(tmp_path: Path) -> None:
    """A FIFO blocked the import forever waiting for a writer; /dev/zero is one endless line."""
    fifo = tmp_path / "rollouts.jsonl"
    os.mkfifo(fifo)
    out = gym("import", "nemo-gym", str(fifo), "--out", "run", cwd=tmp_path, timeout=60)
    assert out.returncode == 1 and "rollouts.jsonl: not a regular file" in out.stderr
    previous = signal.signal(signal.SIGALRM, _too_long)
    signal.alarm(30)
    try:
        with pytest.raises(InteropError, match="/dev/zero: not a regular file"):
            import_rollouts(Path("/dev/zero"), tmp_path / "run")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not (tmp_path / "run").exists()


def _too_long(*_: object) -> None:
    raise TimeoutError("the import read a special file instead of refusing it")


def test_tool_items_without_their_ids_are_refused(tmp_path: Path) -> None:
    """A function_call and its output without call_id paired on null: health passed them and
    `gym data trajectories` wrote `"tool_call_id": null`, which fine-tuning uploads refuse."""
    path = tmp_path / "r.jsonl"
    call = {"type": "function_call", "name": "f", "arguments": "{}"}
    result = {"type": "function_call_output", "output": "ok"}
    path.write_text(
        _edited(lambda r: r["response"].update(output=[call, result, *r["response"]["output"]]))
        + "\n"
    )
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    message = str(caught.value)
    assert "r.jsonl:1: response.output[0].call_id: missing" in message
    assert "r.jsonl:1: response.output[1].call_id: missing" in message


def test_a_content_filtered_response_imports_as_refused_not_scored(tmp_path: Path) -> None:
    """`status: incomplete` with `incomplete_details.reason: content_filter` (the answer withheld
    part-way) was imported as a completed rollout scored with the line's reward; gymflow's own
    model client calls the same response a refusal."""
    path = tmp_path / "r.jsonl"
    filtered = _edited(
        lambda r: r["response"].update(
            status="incomplete", incomplete_details={"reason": "content_filter"}
        )
    )
    path.write_text(
        json.dumps(GOOD)
        + "\n"
        + filtered.replace('"_ng_rollout_index": 0', '"_ng_rollout_index": 1')
        + "\n"
    )
    out = gym_in_process("import", "nemo-gym", str(path), "--out", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    con = duckdb.connect(str(store_path(tmp_path / "run")), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.repeat_index, r.status, r.failure_kind, v.reward FROM rollouts r "
            "LEFT JOIN verifications v USING (rollout_id) ORDER BY r.repeat_index"
        ).fetchall()
    finally:
        con.close()
    assert rows == [(0, "completed", None, 1.0), (1, "failed", "refused", None)]


def test_a_file_saved_by_a_windows_tool_imports_as_it_is(tmp_path: Path) -> None:
    """A byte order mark and CRLF line ends (what Notepad and PowerShell write): the mark was
    "not JSON: Unexpected UTF-8 BOM", refusing a file whose every row is sound."""
    second = _edited(lambda r: r.update(_ng_rollout_index=1, reward=0.0))
    text = json.dumps(GOOD) + "\r\n" + second + "\r\n"
    (tmp_path / "r.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    out = gym_in_process("import", "nemo-gym", "r.jsonl", "--out", "run", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert (result["tasks"], result["rollouts"], result["failed"]) == (1, 2, 0)
    con = duckdb.connect(str(store_path(tmp_path / "run")), read_only=True)
    try:
        rewards = con.execute("SELECT list(reward ORDER BY reward) FROM verifications").fetchone()
        prompt = con.execute("SELECT prompt FROM tasks").fetchone()
    finally:
        con.close()
    assert rewards == ([0.0, 1.0],) and prompt == ("What is 2 + 2?",)


def test_the_cli_refuses_a_reward_given_twice(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text(HOSTILE["reward given twice"][0] + "\n")
    out = gym_in_process("import", "nemo-gym", "r.jsonl", "--out", "run", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "r.jsonl:1: reward: given more than once" in " ".join(out.stderr.split())
    assert not (tmp_path / "run").exists()


def test_two_files_concatenated_are_refused_not_merged_into_each_others_tasks(
    tmp_path: Path,
) -> None:
    """`cat a.jsonl b.jsonl`: each file numbers its tasks from 0, so b's "3 + 3" rollout was
    imported as a repeat of a's "2 + 2" task and scored there, with nothing for health to see."""
    other = _edited(
        lambda r: (
            r["responses_create_params"]["input"][0].update(content="What is 3 + 3?"),
            r.update(_ng_rollout_index=1, reward=0.0),
        )
    )
    (tmp_path / "r.jsonl").write_text(json.dumps(GOOD) + "\n" + other + "\n")
    out = gym_in_process("import", "nemo-gym", "r.jsonl", "--out", "run", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert (
        "r.jsonl:2: responses_create_params.input: its user message is not that of task 0 in "
        "r.jsonl (line 1)"
    ) in said
    assert not (tmp_path / "run").exists()


def test_an_exported_grading_failure_imports_unscored(tmp_path: Path) -> None:
    """`gym export` writes a completed rollout whose reward was no finite number to the failures
    file with `gymflow_verification: {"status": "ok"}`; imported back it became an `ok`
    verification without a reward: a scored fail where the grading had failed."""
    b = StoreBuilder(RunMeta(repeats=2))
    b.task("t0", 7)
    b.fill("t0", "11")
    record = b.rollouts[-1]
    record.verification = dataclasses.replace(record.verification, reward=float("nan"))
    b.write(tmp_path / "run")
    gym_in_process(
        "export", "run", "--format", "nemo-gym", "--out", "r.jsonl", cwd=tmp_path, check=True
    )
    gym_in_process("import", "nemo-gym", "r.jsonl", "--out", "back", cwd=tmp_path, check=True)
    con = duckdb.connect(str(store_path(tmp_path / "back")), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.repeat_index, r.status, v.status, v.reward, v.failure_kind FROM rollouts r "
            "JOIN verifications v USING (rollout_id) ORDER BY r.repeat_index"
        ).fetchall()
    finally:
        con.close()
    assert rows == [
        (0, "completed", "ok", 1.0, None),
        (1, "completed", "error", None, "non_finite_reward"),
    ]
    profile = gym_in_process("eval", "profile", "back", "--json", cwd=tmp_path, check=True)
    assert json.loads(profile.stdout)["coverage"]["scored"] == 1


def test_a_failures_line_of_another_task_is_refused(tmp_path: Path) -> None:
    """The same concatenation in `_failures.jsonl`: another file's failed "3 + 3" attempt was
    imported as a failed rollout of this file's "2 + 2" task."""
    (tmp_path / "r.jsonl").write_text(json.dumps(GOOD) + "\n")
    other = _edited(
        lambda r: (
            r["responses_create_params"]["input"][0].update(content="What is 3 + 3?"),
            r.update(_ng_rollout_index=1, _ng_failure_class="timeout_exceeded"),
        )
    )
    (tmp_path / "r_failures.jsonl").write_text(other + "\n")
    out = gym_in_process("import", "nemo-gym", "r.jsonl", "--out", "run", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert (
        "r_failures.jsonl:1: responses_create_params.input: its user message is not that of task "
        "0 in r.jsonl (line 1)"
    ) in said
    assert not (tmp_path / "run").exists()
