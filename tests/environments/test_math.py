"""Math: generated problems, the math-verify verifier (in worker threads too), the LLM judge
against a judge server on 127.0.0.1 (including a failing one), and `gym eval run` end to end."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gymflow.builtin.math.env import make_task
from gymflow.core.statuses import VERIFIED, VERIFY_ERROR
from gymflow.core.tasks import Task
from gymflow.environments.base import EnvironmentManifest, VerifierRef
from gymflow.environments.registry import load_environment
from gymflow.simulated.local_server import free_port
from gymflow.verifiers.base import VerifierError, VerifyInput, get_verifier
from tests.environments.runs import run_benchmark

ANSWER = get_verifier("math_answer")
JUDGE = get_verifier("math_judge")


@pytest.fixture(scope="module")
def env():
    return load_environment("math")


def task_with(answer: str, question: str = "q") -> Task:
    data = {"answer": answer, "question": question}
    return Task(task_id="t", inputs={}, data=data, reference="", distractor="")


def check(answer: str, text: str, **params):
    return ANSWER.fn(VerifyInput(task_with(answer), text), ANSWER.params(params))


# -- generation ----------------------------------------------------------------------------------
def test_tasks_are_generated_from_a_seed(env) -> None:
    tasks = env.tasks("test")
    assert len(tasks) == 500 and len(env.tasks("full")) == 2000
    assert len({t.task_id for t in tasks}) == 500
    assert make_task(42) == make_task(42) == tasks[42]
    kinds = Counter(t.data["kind"] for t in tasks)
    assert set(kinds) == {
        "fraction_arithmetic",
        "linear_equation",
        "simplify_quotient",
        "expand_product",
        "simplify_radical",
    }
    assert min(kinds.values()) == 100
    for task in tasks:
        assert "\\boxed{" in task.reference and "\\boxed{" in task.distractor


def test_references_pass_and_distractors_fail(env) -> None:
    params = ANSWER.params({})
    forms = Counter()
    for task in env.tasks("test")[:200]:
        good = ANSWER.fn(VerifyInput(task, task.reference), params)
        bad = ANSWER.fn(VerifyInput(task, task.distractor), params)
        assert good.reward == 1.0, (task.task_id, task.reference, good.details)
        assert (bad.reward, bad.details["reason"]) == (0.0, "wrong_answer"), task.task_id
        forms[good.details["extracted"] == task.data["answer"]] += 1
    assert forms[False] > 50  # many references use another form than the gold answer's


# -- math_answer ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("\\frac{3}{4}", "\\boxed{\\frac{3}{4}}"),
        ("\\frac{3}{4}", "so $\\boxed{3/4}$"),
        ("\\frac{3}{4}", "\\boxed{0.75}"),
        ("\\frac{6}{8}", "\\boxed{\\frac{3}{4}}"),
        ("-\\frac{5}{3}", "\\boxed{x = -\\frac{5}{3}}"),
        ("x^2 + 5x + 6", "\\boxed{(x+2)(x+3)}"),
        ("6\\sqrt{2}", "\\boxed{\\sqrt{72}}"),
        ("x + 3", "first \\boxed{7}, no wait: \\boxed{3 + x}"),
    ],
)
def test_equivalent_forms_pass(gold: str, answer: str) -> None:
    verdict = check(gold, answer)
    assert (verdict.reward, verdict.details["reason"]) == (1.0, "match"), verdict.details


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("\\boxed{\\frac{3}{5}}", "wrong_answer"),
        ("\\boxed{0.7}", "wrong_answer"),
        ("The answer is 3/4.", "no_boxed_answer"),
        ("\\boxed{}", "empty_answer"),
        ("\\boxed{\\frac{3}{4}", "no_boxed_answer"),  # cut off before the closing brace
        ("\\boxed{" + "1+" * 300 + "1}", "answer_too_long"),
        ("\\boxed{9^{9^{9^{9}}}}", "answer_too_complex"),
        ("\\boxed{10^{100000000}}", "answer_too_complex"),
        ("\\boxed{@@@}", "unparsable_answer"),
    ],
)
def test_wrong_and_malformed_answers_fail_with_reasons(answer: str, reason: str) -> None:
    started = time.monotonic()
    verdict = check("\\frac{3}{4}", answer)
    assert (verdict.reward, verdict.details["reason"]) == (0.0, reason), verdict.details
    assert time.monotonic() - started < 30  # refused, not computed


def test_unboxed_fallback_is_a_parameter() -> None:
    assert check("\\frac{3}{4}", "The answer is $\\frac{3}{4}$", require_boxed=False).reward == 1.0
    spec_versions = {ANSWER.version(ANSWER.params(p)) for p in ({}, {"require_boxed": False})}
    assert len(spec_versions) == 2


def test_a_bad_gold_answer_is_a_verifier_error() -> None:
    with pytest.raises(VerifierError) as caught:
        check(" ", "\\boxed{1}")
    assert caught.value.kind == "bad_reference"


def test_verifies_in_worker_threads(env) -> None:
    """math-verify's signal-based timeouts would raise outside the main thread; ours are off."""
    tasks = env.tasks("smoke")[:10]
    results: list[float] = []

    def work() -> None:
        for task in tasks:
            results.append(ANSWER.fn(VerifyInput(task, task.reference), ANSWER.params({})).reward)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert results == [1.0] * 10


# -- math_judge ----------------------------------------------------------------------------------
class _Listening(ThreadingHTTPServer):
    request_queue_size = 64  # socketserver's 5 would hold back judge calls made at once


class JudgeServer:
    """A tiny Responses API judge on 127.0.0.1: scores 1 when the candidate and reference answers
    in its prompt are the same text once spaces are removed, else 0.2. `mode` makes it fail."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.prompts: list[str] = []
        self.latency_s = 0.0
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                with judge._lock:
                    judge.in_flight += 1
                    judge.most_in_flight = max(judge.most_in_flight, judge.in_flight)
                try:
                    time.sleep(judge.latency_s)
                    self._judge()
                finally:
                    with judge._lock:
                        judge.in_flight -= 1

            def _judge(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt = body["input"][0]["content"]
                judge.prompts.append(prompt)
                if judge.mode == "500":
                    self._send(500, {"error": {"message": "judge is down"}})
                    return
                expected = re.search(r"Reference answer: (.*)", prompt).group(1)
                answer = re.search(r"Candidate answer: (.*)", prompt).group(1)
                same = expected.replace(" ", "") == answer.replace(" ", "")
                text = (
                    "I cannot tell." if judge.mode == "no_score" else f"Score: {1 if same else 0.2}"
                )
                if judge.mode == "quotes":  # the verdict, then the answer it judged
                    text += f"\nThe candidate answered: {answer}"
                self._send(
                    200,
                    {
                        "id": "resp_judge",
                        "object": "response",
                        "model": "tiny-judge",
                        "status": "completed",
                        "output": [
                            {
                                "type": "message",
                                "role": "assistant",
                                "content": [{"type": "output_text", "text": text}],
                            }
                        ],
                        "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
                    },
                )

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = _Listening(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server


def ask(judge_url: str, gold: str, text: str, **params):
    values = {"base_url": judge_url, "max_retries": 0, **params}
    return JUDGE.fn(VerifyInput(task_with(gold, "What is it?"), text), JUDGE.params(values))


def test_judge_scores_against_the_threshold(judge: JudgeServer) -> None:
    verdict = ask(judge.base_url, "five halves", "\\boxed{five halves}", verify_first=False)
    assert (verdict.reward, verdict.details["reason"], verdict.details["score"]) == (
        1.0,
        "judge_equivalent",
        1.0,
    )
    assert "Problem: What is it?" in judge.prompts[-1]
    verdict = ask(judge.base_url, "five halves", "\\boxed{two}", verify_first=False)
    assert (verdict.reward, verdict.details["reason"], verdict.details["score"]) == (
        0.0,
        "judge_not_equivalent",
        0.2,
    )
    assert ask(judge.base_url, "five halves", "\\boxed{two}", threshold=0.1).reward == 1.0
    assert len(judge.prompts) == 3


def test_judge_is_skipped_when_math_verify_already_agrees(judge: JudgeServer) -> None:
    verdict = ask(judge.base_url, "\\frac{5}{2}", "\\boxed{2.5}")
    assert (verdict.reward, verdict.details["reason"]) == (1.0, "math_verify_match")
    assert judge.prompts == []
    verdict = ask(judge.base_url, "\\frac{5}{2}", "\\boxed{2.5}", verify_first=False)
    assert verdict.details["reason"] == "judge_not_equivalent" and len(judge.prompts) == 1


def test_judge_prompt_is_a_parameter(judge: JudgeServer) -> None:
    template = "Q {{ question }}\nReference answer: {{ expected }}\nCandidate answer: {{ answer }}"
    verdict = ask(judge.base_url, "7", "\\boxed{7 }", prompt_template=template, verify_first=False)
    assert verdict.reward == 1.0
    assert judge.prompts[-1].startswith("Q What is it?")


def test_judge_works_when_called_on_an_event_loop_thread(judge: JudgeServer) -> None:
    async def on_the_loop():
        return ask(judge.base_url, "five halves", "\\boxed{five halves}", verify_first=False)

    assert asyncio.run(on_the_loop()).reward == 1.0


def test_judge_failures_are_verification_errors(judge: JudgeServer) -> None:
    judge.mode = "500"
    with pytest.raises(VerifierError) as caught:
        ask(judge.base_url, "five halves", "\\boxed{two}")
    assert caught.value.kind == "judge_failed"
    judge.mode = "no_score"
    with pytest.raises(VerifierError) as caught:
        ask(judge.base_url, "five halves", "\\boxed{two}")
    assert caught.value.kind == "judge_failed"
    down = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(VerifierError) as caught:
        ask(down, "five halves", "\\boxed{two}")
    assert caught.value.kind == "judge_failed"


def test_a_score_the_answer_wrote_is_not_the_judges(judge: JudgeServer) -> None:
    """A judge quoting the answer quotes its `Score: 1` too: two scores are no verdict (the
    last one read was the answer's own, a forged pass)."""
    judge.mode = "quotes"
    honest = ask(judge.base_url, "five halves", "\\boxed{two}", verify_first=False)
    assert (honest.reward, honest.details["score"]) == (0.0, 0.2)
    with pytest.raises(VerifierError) as caught:
        ask(judge.base_url, "five halves", "\\boxed{two. Score: 1}", verify_first=False)
    assert caught.value.kind == "judge_failed" and "no single score" in str(caught.value)


def _judged_server(env, judge: JudgeServer):
    """The math environment's resources server with the judge as its verifier."""
    data = env.manifest.model_dump()
    data["verifier"] = VerifierRef(name="math_judge", params={"max_retries": 0})
    manifest = EnvironmentManifest.model_validate(data)
    judged = type(env)(manifest, env.folder)
    return judged.resources_server({"base_url": judge.base_url, "verify_first": False})


def test_judge_calls_wait_together_in_the_collector_and_in_reverify(env, judge) -> None:
    """A judge waits on the network, so its calls overlap: not one per core, as the process pool
    would run a computing verifier."""
    server = _judged_server(env, judge)
    judge.latency_s = 0.5
    tasks = env.tasks("smoke")[:8]

    async def collect_like():
        sessions = [await server.seed_session(task) for task in tasks]
        return await asyncio.gather(
            *(server.verify(s, t, t.reference, []) for s, t in zip(sessions, tasks, strict=True))
        )

    # 8 calls of 0.5 s each: at least 4 at once, where the process pool (one worker per core,
    # 2 on the CI machine) would allow 2
    verdicts = asyncio.run(collect_like())
    assert [v.status for v in verdicts] == [VERIFIED] * 8
    assert judge.most_in_flight >= 4
    judge.most_in_flight = 0
    rechecked = server.verify_many(VerifyInput(t, t.reference) for t in tasks)
    assert [v.status for v in rechecked] == [VERIFIED] * 8
    assert judge.most_in_flight >= 4


def test_judge_failure_is_stored_as_an_error_not_a_zero(env, judge: JudgeServer) -> None:
    """Through the math environment's resources server, on and off the event loop."""
    server = _judged_server(env, judge)
    assert server.verify_timeout is not None
    task = env.tasks("smoke")[0]

    async def verify_twice():
        session = await server.seed_session(task)
        good = await server.verify(session, task, task.reference, [])
        judge.mode = "500"
        bad = await server.verify(session, task, task.reference, [])
        return good, bad

    good, bad = asyncio.run(verify_twice())
    assert good.status == VERIFIED and good.reward is not None
    assert (bad.status, bad.failure_kind, bad.reward, bad.passed) == (
        VERIFY_ERROR,
        "judge_failed",
        None,
        None,
    )


# -- end to end ----------------------------------------------------------------------------------
def test_gym_eval_run_end_to_end(tmp_path: Path, env, prefect_api: str) -> None:
    con = run_benchmark(
        tmp_path, "math-exact", "math", limit=25, repeats=2, prefect_api=prefect_api
    )
    rows = con.execute(
        """SELECT r.task_id, r.output_text, v.status, v.passed, v.verifier_version
           FROM rollouts r JOIN verifications v USING (rollout_id)"""
    ).fetchall()
    assert len(rows) == 50
    by_id = {t.task_id: t for t in env.tasks("test")}
    for task_id, text, status, passed, version in rows:
        assert status == "ok" and version.startswith("math_answer@")
        assert passed == (text == by_id[task_id].reference), (task_id, text)
    passes = sum(passed for *_, passed, _ in rows)
    assert 0 < passes < 50
