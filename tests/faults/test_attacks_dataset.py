"""Hostile dataset files and templates: each was a traceback or a silently wrong value, and is now
one problem naming the file, row and field (or the template's own error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.core.config import ConfigError
from gymflow.core.prompts import PromptError, render_prompt
from tests.conftest import gym
from tests.environments.test_dataset import MAPPED, ROWS, _plan, write_benchmark
from tests.faults.stores import tree_digest

SLOW = "{% set a = 'x' * 4000000 %}{% for i in range(99999) %}{{ a|title|length }}{% endfor %}"


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


#: Templates that held the process for minutes or allocated gigabytes (each was checked to
#: be unbounded in Jinja's own sandbox), and the bound each now meets.
UNBOUNDED = [
    ("{{ 'x'|center(10**9) }}", "a width or count of 1000000000"),
    ("{{ question.ljust(10**9) }}", "a width or count of 1000000000"),
    ("{{ 'x' * 10**9 }}", "would make a value of 1000000000 items"),
    ("{{ 10 ** (10 ** 8) }}", "makes an integer over 65536 bits"),
    ("{{ '%999999999s' % 'x' }}", "a width or count of 999999999"),
    ("{{ '%*s' % (10**9, 'x') }}", "width taken from an argument"),
    ("{{ '{:>{}}'.format('x', 10**9) }}", "width taken from an argument"),
    ("{{ [1]|batch(10**9, 'x')|list }}", "a width or count of 1000000000"),
    ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "100000"),
    ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(60) }}", ""),
    ("{% macro f(s, n) %}{{ f(s ~ s, n - 1) if n else s }}{% endmacro %}{{ f('x', 60) }}", "makes"),
    ("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}", "makes a value of"),
    ("{% set a = 'x' * 4000000 %}{{ a|replace('x', a) }}", "would make a value of"),
    ("{% set a = 'x' * 4000000 %}{{ ([a] * 4000000)|join }}", "more than 100000 loop"),
    (SLOW, "took more than 2 s to render"),  # inside the step and size bounds, 0.1 s a step
    # one step of a filter that runs Python per item: 8 s as one step before it cost a step each
    ("{% set a = 'x' * 4000000 %}{{ a|list|sort|length }}", "more than 100000 loop"),
    ("{% for i in range(99999) %}{{ 'y' * 100000 }}{% endfor %}", "outputs more than"),
    ("{{ ('ab' * 1000000)|wordwrap(1) }}", "wordwrap of 2000000 characters"),
    ("{{ lipsum(10**9) }}", "'lipsum' is undefined"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "expected"), UNBOUNDED)
def test_a_template_without_bounds_is_refused_naming_its_file(
    tmp_path, monkeypatch, template: str, expected: str
) -> None:
    _bench(tmp_path, "big", (json.dumps(ROWS[0]) + "\n").encode(), prompt_template=template)
    with pytest.raises(ConfigError) as caught:
        _plan(tmp_path, "big", monkeypatch)
    message = str(caught.value)
    assert "row 0 (q1): prompt:" in message and expected in message
    assert message.endswith(
        f"(template from {tmp_path / 'benchmarks' / 'big.yaml'} (prompt_template))"
    )


def test_a_bounded_template_keeps_what_prompts_use() -> None:
    template = (
        "{% set ns = namespace(n=0) %}{% for t in tags %}{% set ns.n = ns.n + 1 %}{% endfor %}"
        "{% macro box(x) %}[{{ x|center(5) }}]{% endmacro %}{{ box(q) }} {{ tags|join(', ') }} "
        "{{ '%.2f' % 3.14159 }} {{ '{:>4}'.format(ns.n) }} {{ q|replace('a', 'bb') ~ '!' }} "
        "{{ 'a\nb'|indent(2) }} {{ 2 ** 70 }} {{ 12345678901|filesizeformat }}"
    )
    rendered = render_prompt(template, {"q": "a", "tags": ["x", "y"]})
    assert rendered == "[  a  ] x, y 3.14    2 bb! a\n  b 1180591620717411303424 12.3 GB"


def test_validate_stops_a_slow_template_at_its_time_bound_on_the_first_row(tmp_path) -> None:
    """A template inside every step and size bound, 0.1 s a step: `gym env validate` was still
    rendering its first row at 90 s. Now one row costs the bound, the others are not tried,
    and the problem names the file and row; nothing is written."""
    rows = [dict(ROWS[0], id=f"q{i}") for i in range(50)]
    envs = tmp_path / "envs"
    _bench(envs, "slow", "".join(json.dumps(r) + "\n" for r in rows).encode(), prompt_template=SLOW)
    (tmp_path / "eval.yaml").write_text("benchmark: slow\n")
    before = tree_digest(tmp_path)
    validated = gym(
        "env", "validate", "eval.yaml", cwd=tmp_path, env={"GYMFLOW_ENVIRONMENTS_PATH": str(envs)}
    )
    assert validated.returncode == 1, validated.stderr
    assert "Traceback" not in validated.stdout + validated.stderr
    report = " ".join(validated.stdout.split())
    assert "row 0 (q0): prompt: took more than 2 s to render; the 49 rows after it" in report
    assert "slow.yaml (prompt_template)" in report
    assert tree_digest(tmp_path) == before


def test_a_corrupt_parquet_page_is_a_problem_naming_its_row_group(tmp_path, monkeypatch) -> None:
    """A data page whose header is not thrift: an `OSError: Couldn't deserialize thrift`
    traceback. Now one problem naming the file and the row group's rows; the groups before
    and after it are read, so their own problems are reported in the same pass."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(ROWS[0], id=f"q{i}", answer=i) for i in range(30)]
    rows[25]["answer"] = float("nan")
    path = tmp_path / "benchmarks" / "d.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10, compression="NONE")
    column = pq.ParquetFile(path).metadata.row_group(1).column(1)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset : column.data_page_offset + 12] = b"\xff" * 12
    path.write_bytes(data)
    write_benchmark(tmp_path, "torn", {"path": "d.parquet", "fields": MAPPED})
    with pytest.raises(ConfigError) as caught:
        _plan(tmp_path, "torn", monkeypatch)
    message = str(caught.value)
    assert f"{path}: row group 1 (rows 10 to 19): cannot be read: Couldn't deserialize" in message
    assert "row 25" in message and "non-finite" in message
