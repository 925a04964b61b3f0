"""Answers a policy under RL pressure could send to escape its score: each crashed a verifier or
the tool loop, and a crash is a failure left out of pass@1, so a wrong answer that crashes
raised the score. Each is now the wrong answer it is: verified, reward 0."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest

from gymflow.core.tasks import Task
from gymflow.environments.registry import load_environment
from gymflow.harness.tool_arguments import MalformedArguments, parse_arguments
from gymflow.verifiers.base import VerifyInput, get_verifier
from tests.conftest import gym

NESTED = "[" * 5000 + "]" * 5000


def _verify(environment: str, text: str, trajectory: list[dict]):
    env = load_environment(environment)
    task = env.tasks()[0]
    return env.resources_server().verify_sync(VerifyInput(task, text, trajectory))


@pytest.mark.parametrize(
    "number",
    ["9" * 400, "-" + "9" * 400, "9" * 400 + "/3", "9," * 400 + "9"],
    ids=["400 digits", "negative", "fraction", "with commas"],
)
def test_a_number_past_float_range_is_a_wrong_answer(number: str) -> None:
    verification = _verify("arithmetic", f"Answer: {number}", [])
    assert (verification.status, verification.reward, verification.passed) == ("ok", 0.0, False)
    assert verification.details["reason"] == "unparsable_answer"


NUMERIC = get_verifier("numeric_match")


@pytest.mark.parametrize(
    ("reference", "answer", "passed"),
    [
        (1_000_000, "1000001", False),  # inside the default rel_tol 1e-6: it passed
        (1_000_000, "999999.9999", False),
        (1_000_000, "1,000,000", True),
        (1_000_000, "1000000.0", True),
        (1_000_000, "2000000/2", True),
        (2**53 + 1, str(2**53), False),  # one float: it passed
        ("42", "42", True),
        (2.5, "2.5000001", True),  # a non-integer reference keeps its tolerance
        (2.5, "5/2", True),
        (2.5, "2.6", False),
    ],
)
def test_an_integer_reference_is_matched_exactly(reference, answer, passed) -> None:
    assert _numeric(reference, answer, {}) == passed


def test_an_integer_reference_takes_an_explicit_absolute_tolerance() -> None:
    """abs_tol is how a study accepts near answers on purpose; rel_tol stays for rounding."""
    assert _numeric(1_000_000, "1000001", {"abs_tol": 1.5})
    assert not _numeric(1_000_000, "1000002", {"abs_tol": 1.5})
    assert not _numeric(1_000_000, "1000001", {"rel_tol": 0.01})


def _numeric(reference, answer: str, params: dict) -> bool:
    task = Task(task_id="t", inputs={}, data={"answer": reference}, reference="", distractor="")
    verdict = NUMERIC.fn(VerifyInput(task, f"Answer: {answer}"), NUMERIC.params(params))
    return verdict.reward == 1.0


def test_bfcl_arguments_nested_thousands_deep_are_a_malformed_call() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": NESTED}
    verification = _verify("bfcl", "", [call])
    assert (verification.status, verification.reward) == ("ok", 0.0)
    assert verification.details["reason"] == "malformed_call"


def test_tool_arguments_nested_thousands_deep_are_malformed_not_a_harness_error() -> None:
    with pytest.raises(MalformedArguments, match="nest too deeply"):
        parse_arguments(NESTED, {"type": "object"})


def test_a_backtracking_pattern_is_bounded_by_its_worker(tmp_path, monkeypatch) -> None:
    """`^(\\w+\\s?)*$` against 40 characters and a `!` backtracks for years; inline, it held
    the collector's event loop. In its worker it is killed at regex_match's bound and recorded
    as the verifier's timeout."""
    from tests.environments.test_dataset import _plan, write_benchmark, write_rows

    rows = [{"id": "p1", "question": "Say a word.", "pattern": r"^(\w+\s?)*$"}]
    write_rows(tmp_path / "benchmarks" / "re.jsonl", rows)
    write_benchmark(
        tmp_path, "words", {"path": "re.jsonl", "fields": {"id": "id"}},
        verifier={"name": "regex_match", "params": {"mode": "search"}},
    )  # fmt: skip
    plan = _plan(tmp_path, "words", monkeypatch)
    server = plan.env.resources_server(plan.verifier_params)
    (task,) = plan.all_tasks
    assert server.verifier.runs == "worker"
    verification = server.verify_bounded(VerifyInput(task, "a" * 40 + "!"))
    assert (verification.status, verification.failure_kind) == ("error", "verifier_timeout")
    assert server.verify_bounded(VerifyInput(task, "two words")).reward == 1.0


class _HostileCalls(BaseHTTPRequestHandler):
    """A Responses server whose every answer is a function call with a lone surrogate escape in
    its arguments: valid JSON, parsed by the verifier into text no UTF-8 store can hold."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        arguments = '{"base": 10, "height": 5, "unit": "\\ud800"}'
        call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments}
        body = json.dumps({"id": "r", "model": "m", "status": "completed", "output": [call]})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_a_lone_surrogate_in_call_arguments_is_stored_not_a_failed_commit(
    tmp_path: Path, prefect_api: str
) -> None:
    """BFCL's verdict lists the calls it judged, arguments parsed: a `\\ud800` in them made the
    verification unstorable, so the batch's commit failed and the run stopped, every time."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileCalls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        config = tmp_path / "eval.yaml"
        config.write_text(
            "benchmark: bfcl-smoke\nlimit: 3\nrepeats: 1\nout: run\n"
            f"model: {{kind: responses, base_url: '{url}', name: m, max_retries: 0}}\n"
        )
        result = gym("eval", "run", str(config), cwd=tmp_path, env={"PREFECT_API_URL": prefect_api})
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert result.returncode in (0, 2), result.stdout + result.stderr  # ran to its end
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.status, v.status, v.passed, v.details_json FROM rollouts r "
            "JOIN verifications v USING (rollout_id)"
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 3
    assert all(row[:3] == ("completed", "ok", False) for row in rows), rows
    assert all("\ufffd" in row[3] for row in rows)  # the argument, kept as U+FFFD
