"""`gym data trajectories`: passing and paired trajectories of a tool-loop run as chat-format
training data, read back by standard readers (json, Polars' NDJSON reader, the openai SDK's chat
types, Parquet), and the health, length and duplicate filters on a constructed run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import duckdb
import polars as pl
import pyarrow.parquet as pq
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import TypeAdapter

from gymflow.analysis.health import health
from gymflow.data.provenance import read_provenance
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import LedgerRun, gym, gym_in_process

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
TOOLS = TypeAdapter(list[ChatCompletionToolParam])


@pytest.fixture(scope="module")
def ledger_run(ledger_run: LedgerRun) -> Path:
    """The suite's tool-loop run of the ledger environment (tests/conftest.py), shared with the
    tool-loop CLI tests: the run directory the exports read."""
    return ledger_run.run_dir


def _export(
    run: Path, out: Path, *args: str, runner: Callable[..., CompletedProcess[str]] = gym
) -> dict:
    """`gym data trajectories … --json`'s summary; `runner` gym_in_process for the filter checks
    that export the same constructed run over and over."""
    result = runner(
        "data", "trajectories", str(run), "--out", str(out), "--json", *args, cwd=out.parent
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _store(run: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _check_conversation(messages: list[dict]) -> None:
    """Valid chat messages: every tool message answers a tool call made before it."""
    MESSAGES.validate_python(messages)
    called: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            called.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in called


def test_passing_trajectories_load_as_chat_messages_with_tool_calls(ledger_run: Path) -> None:
    out = ledger_run.parent / "sft.jsonl"
    payload = _export(ledger_run, out, "--pass-rate", "[0,1]")
    lines = out.read_text().splitlines()
    assert len(lines) == payload["counts"]["rows"] > 0
    rows = [json.loads(line) for line in lines]
    assert all(set(row) == {"messages", "tools"} for row in rows)
    for row in rows:
        _check_conversation(row["messages"])
        assert row["messages"][0]["role"] == "user"
        assert row["messages"][-1]["role"] == "assistant"
        assert [t["function"]["name"] for t in TOOLS.validate_python(row["tools"])] == [
            "deposit",
            "balance",
        ]
    calls = [c for row in rows for m in row["messages"] for c in m.get("tool_calls") or []]
    assert calls
    # rollouts with malformed arguments are flagged by health, so not exported
    assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    assert any(m["role"] == "tool" for row in rows for m in row["messages"])
    # a second, independent reader
    frame = pl.read_ndjson(out)
    assert frame.height == len(rows) and frame.columns == ["messages", "tools"]

    meta = read_provenance(out)
    assert meta["kind"] == "trajectories:passing" and meta["filters"]["healthy"] is True
    assert meta["counts"]["rollouts"]["kept_passing"] == len(rows)


def test_parquet_rows_are_passing_healthy_rollouts(ledger_run: Path) -> None:
    out = ledger_run.parent / "sft.parquet"
    _export(ledger_run, out, "--pass-rate", "[0,1]")
    table = pq.read_table(out).to_pylist()
    ids = [row["rollout_id"] for row in table]
    passing = {
        rid for (rid,) in _store(ledger_run, "SELECT rollout_id FROM verifications WHERE passed")
    }
    assert ids and set(ids) <= passing
    con = duckdb.connect(str(ledger_run / "gymflow.duckdb"), read_only=True)
    try:
        flagged = {v["rollout_id"] for v in health(con, max_listed=None).rollout_verdicts}
    finally:
        con.close()
    assert flagged, "the ledger run has malformed tool calls: health flags some rollouts"
    assert not flagged & set(ids)
    for row in table:
        messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        _check_conversation(messages)
    assert read_provenance(out)["kind"] == "trajectories:passing"

    # Without the health and duplicate filters: every passing rollout, exactly.
    everything = ledger_run.parent / "all.parquet"
    _export(
        ledger_run, everything, "--pass-rate", "[0,1]", "--include-flagged", "--keep-duplicates"
    )
    assert sorted(pq.read_table(everything).column("rollout_id").to_pylist()) == sorted(
        rid
        for (rid,) in _store(
            ledger_run,
            "SELECT r.rollout_id FROM rollouts r JOIN verifications v USING (rollout_id) "
            "WHERE r.status = 'completed' AND v.status = 'ok' AND v.passed",
        )
    )


def test_pairs_share_a_prompt_and_differ_in_outcome(ledger_run: Path) -> None:
    out = ledger_run.parent / "pairs.jsonl"
    _export(ledger_run, out, "--kind", "pairs", "--include-flagged")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows, "the ledger run has sometimes-pass tasks"
    for row in rows:
        assert set(row) == {"input", "preferred_output", "non_preferred_output"}
        prompt = row["input"]["messages"]
        assert [m["role"] for m in prompt] == ["user"]
        for side in ("preferred_output", "non_preferred_output"):
            assert row[side][0]["role"] == "assistant"
            _check_conversation(prompt + row[side])
    parquet = ledger_run.parent / "pairs.parquet"
    _export(ledger_run, parquet, "--kind", "pairs", "--include-flagged")
    pairs = pq.read_table(parquet).to_pylist()
    assert len(pairs) == len(rows)
    verdicts = dict(_store(ledger_run, "SELECT rollout_id, passed FROM verifications"))
    tasks = dict(_store(ledger_run, "SELECT rollout_id, task_id FROM rollouts"))
    for pair in pairs:
        assert verdicts[pair["preferred_rollout_id"]] is True
        assert verdicts[pair["non_preferred_rollout_id"]] is False
        assert tasks[pair["preferred_rollout_id"]] == tasks[pair["non_preferred_rollout_id"]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sometimes-pass tasks; every right answer of a task has the same text."""
    b = StoreBuilder(RunMeta(repeats=4))
    b.task("a", 10)
    b.task("b", 20)
    b.fill("a", "1110")
    b.rollout("b", 0, output_tokens=200)  # passing but long (below the 256-token limit)
    b.rollout("b", 1, text="Answer: 20")  # passing, a different text
    b.rollout("b", 2, incomplete=True)  # passing, but truncated: a health warning
    b.rollout("b", 3, correct=False)
    return b.write(tmp_path_factory.mktemp("built") / "run")


def _rollouts(run: Path, *args: str) -> list[str]:
    out = run.parent / "out.parquet"
    _export(run, out, *args, runner=gym_in_process)
    return pq.read_table(out).column("rollout_id").to_pylist()


def test_health_length_and_duplicate_filters(built: Path) -> None:
    from gymflow.core.records import rollout_id

    def rid(task: str, repeat: int) -> str:
        return rollout_id("run-a", task, repeat)

    assert _rollouts(built, "--include-flagged", "--keep-duplicates") == [
        rid("a", 0),
        rid("a", 1),
        rid("a", 2),
        rid("b", 0),
        rid("b", 1),
        rid("b", 2),
    ]
    # a's three right answers are one text; b's repeat 2 is the truncated one
    assert _rollouts(built) == [rid("a", 0), rid("b", 0), rid("b", 1)]
    assert _rollouts(built, "--max-rollout-tokens", "100") == [rid("a", 0), rid("b", 1)]


def test_bad_output_names_fail_plainly(built: Path) -> None:
    for args, message in {
        ("--out", "x.csv"): "--out x.csv: name a .jsonl or .parquet file",
        ("--out", "x.jsonl", "--kind", "best"): "--kind 'best': choose one of passing, pairs",
        ("--out", "/proc/gymflow.jsonl"): "/proc/gymflow.jsonl: cannot write",
        ("--out", "/proc/gymflow.parquet"): "/proc/gymflow.parquet: cannot write",
    }.items():
        result = gym_in_process("data", "trajectories", str(built), *args, cwd=built.parent)
        assert result.returncode == 1 and message in result.stderr
