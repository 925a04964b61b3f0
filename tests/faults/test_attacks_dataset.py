"""Hostile dataset files and templates: each was a traceback or a silently wrong value, and is now
one problem naming the file, row and field (or the template's own error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.config import ConfigError
from gymflow.core.prompts import PromptError, render_prompt
from tests.environments.test_dataset import MAPPED, ROWS, _plan, write_benchmark


def _bench(tmp_path: Path, name: str, body: bytes, suffix: str = ".jsonl", **extra) -> None:
    data = tmp_path / "benchmarks" / f"d{suffix}"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(body)
    write_benchmark(tmp_path, name, {"path": f"d{suffix}", "fields": MAPPED}, **extra)


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, monkeypatch) -> None:
    """A DictReader keeps the last of two `answer` columns: the task was silently graded
    against 6, not 5."""
    _bench(tmp_path, "dup", b"id,question,answer,answer,topic,level\nq1,hi,5,6,add,easy\n", ".csv")
    with pytest.raises(ConfigError, match=r"d\.csv: line 1: header repeats column 'answer'"):
        _plan(tmp_path, "dup", monkeypatch)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_byte_order_mark_is_read_as_windows_tools_write_it(tmp_path, monkeypatch, suffix) -> None:
    """Excel's CSV starts with a BOM, which renamed the first column to '\\ufeffid' (so every
    row 'had no id'); a JSONL line 1 with one was 'not JSON'."""
    if suffix == ".csv":
        body = "\ufeffid,question,answer,topic,level\nq1,hi,5,add,easy\n".encode()
    else:
        body = ("\ufeff" + json.dumps(ROWS[0]) + "\n").encode()
    _bench(tmp_path, "bom", body, suffix)
    (task,) = _plan(tmp_path, "bom", monkeypatch).all_tasks
    assert task.task_id == "q1" and task.data == {"answer": 5}


def test_a_short_csv_row_is_named_as_short(tmp_path, monkeypatch) -> None:
    _bench(tmp_path, "short", b"id,question,answer,topic,level\nq1,hi\n", ".csv")
    with pytest.raises(ConfigError, match=r"d\.csv: line 2: fewer cells than the header"):
        _plan(tmp_path, "short", monkeypatch)


def test_a_row_nested_past_what_can_be_hashed_is_a_row_problem(tmp_path, monkeypatch) -> None:
    """orjson reads 1,024 levels but writes 254: a 400-deep row was a TypeError traceback."""
    row = json.dumps(dict(ROWS[0], extra="X")).replace('"X"', "[" * 400 + "]" * 400)
    _bench(tmp_path, "deep", (row + "\n").encode())
    with pytest.raises(ConfigError, match=r"d\.jsonl: line 1: cannot be hashed"):
        _plan(tmp_path, "deep", monkeypatch)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{% for x in range(10**9) %}x{% endfor %}", "OverflowError: Range too big"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ question + 1 }}", "TypeError"),
        ("{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}", "RecursionError"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    ],
)
def test_a_template_that_raises_is_a_prompt_error(template: str, expected: str) -> None:
    with pytest.raises(PromptError, match=expected):
        render_prompt(template, {"question": "Q"})


def test_a_template_error_is_named_by_validation_not_a_traceback(tmp_path, monkeypatch) -> None:
    _bench(
        tmp_path,
        "tpl",
        (json.dumps(ROWS[0]) + "\n").encode(),
        prompt_template="{% for x in range(10**9) %}{{ question }}{% endfor %}",
    )
    with pytest.raises(ConfigError, match=r"row 0 \(q1\): prompt: OverflowError"):
        _plan(tmp_path, "tpl", monkeypatch)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pass_threshold", float("nan")),
        ("pass_threshold", float("-inf")),
    ],
)
def test_a_non_finite_dataset_setting_is_refused(tmp_path, monkeypatch, key, value) -> None:
    """`pass_threshold: .nan` failed every rollout (reward >= NaN is false) and `-.inf` passed
    every one."""
    data = tmp_path / "benchmarks" / "d.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps(ROWS[0]) + "\n")
    write_benchmark(tmp_path, "nf", {"path": "d.jsonl", "fields": MAPPED, key: value})
    with pytest.raises(ConfigError, match=rf"dataset\.{key}: Input should be a finite number"):
        _plan(tmp_path, "nf", monkeypatch)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"input": [{"role": "user", "content": 5}]}, "input.0"),
        ({"input": [{"role": "user", "content": "2+2?"}], "instructions": [1, 2]}, "instructions"),
    ],
)
def test_nemo_gym_rows_with_wrong_types_are_row_problems(
    tmp_path, monkeypatch, params, field
) -> None:
    """`content: 5` was a TypeError traceback; `instructions: [1, 2]` was sent to the model."""
    row = {"id": "a", "answer": 4, "responses_create_params": params}
    _bench(tmp_path, "ng", (json.dumps(row) + "\n").encode())
    write_benchmark(
        tmp_path,
        "ng",
        {"path": "d.jsonl", "format": "nemo_gym", "fields": {"id": "id"}},
        prompt_template="{{ prompt }}",
    )
    with pytest.raises(ConfigError, match=rf"line 1: field 'responses_create_params\.{field}'"):
        _plan(tmp_path, "ng", monkeypatch)


def test_a_removed_dataset_setting_says_what_replaces_it(tmp_path, monkeypatch) -> None:
    """`verify_timeout_s` no longer bounds a verifier (the verifier declares its own): a
    benchmark that still sets it is refused, naming the field and its replacement."""
    data = tmp_path / "benchmarks" / "d.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text(json.dumps(ROWS[0]) + "\n")
    write_benchmark(tmp_path, "old", {"path": "d.jsonl", "fields": MAPPED, "verify_timeout_s": 9})
    with pytest.raises(ConfigError, match=r"verify_timeout_s: removed; .*@verifier\(.*timeout_s"):
        _plan(tmp_path, "old", monkeypatch)
