"""Functional correctness of generated Python: extract the code, load it in the sandbox, and run
the task's tests here against it.

The answer may be a fenced block or bare code, and either a completion of the prompt (the body of
the function) or a whole function. The tests never run where the answer's code runs: `check` runs
in this process against a stand-in that forwards each call to the sandbox and gets back plain data
(gymflow.verifiers.sandbox), so the code can neither reach the verdict nor hand back an object that
lies when compared. Reward 1 only when every test passes; a timeout, a memory bomb or a write
outside the sandbox is the program failing (reward 0 with the reason), code seen touching the
harness fails with failure kind `tampering`, and a sandbox that cannot run at all is a verifier
error."""

from __future__ import annotations

import functools
import re
import time
import traceback
from types import CodeType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier
from gymflow.verifiers.sandbox import (
    CandidateRaised,
    Sandbox,
    SandboxEnded,
    SandboxError,
    SandboxLimits,
    reason_for,
)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
#: The name the tests' code runs under, to find its failing line in a traceback.
_TEST_FILE = "<humaneval tests>"
# Exceptions that mean "the code is not Python".
_CODE_REASONS = {
    "SyntaxError": "syntax_error",
    "IndentationError": "syntax_error",
    "TabError": "syntax_error",
}


class CodeExecParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeout_s: float = Field(5.0, gt=0.0, le=120.0, description="Wall and CPU time per program.")
    memory_mb: int = Field(512, ge=64, le=16384, description="Address-space limit.")
    max_processes: int = Field(16, ge=1, le=1024, description="Processes the program may run.")
    max_file_mb: int = Field(16, ge=1, le=4096, description="Largest file it may write.")


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in an answer: the fenced Python block that defines `entry_point` (else the first
    Python block, else the first block of any language), or the whole text when it has none."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    if not blocks:
        return text
    python = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    if entry_point:
        for body in python:
            if _defines(body, entry_point):
                return body
    return python[0] if python else blocks[0][1]


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.M) is not None


def build_program(prompt: str, code: str, entry_point: str) -> tuple[str, str]:
    """The candidate's module and the answer's form: `function` (the code defines the entry
    point; the prompt still comes first for its imports and helpers) or `completion` (the code
    continues the prompt, re-indented when the model dropped the body's indentation). The tests
    are not in it: they run in the trusted process (`run_tests`)."""
    if _defines(code, entry_point):
        return f"{prompt}\n\n{code}\n", "function"
    return prompt + _as_body(code), "completion"


def tests_source(prompt: str, test: str) -> str:
    return f"{prompt}\n\n{test}\n"


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> CodeType:
    """The tests' code, compiled once per task (a code object is immutable; each run gets a
    fresh namespace)."""
    return compile(source, _TEST_FILE, "exec")


def load_tests(source: str) -> dict[str, Any]:
    """The task's prompt and tests, run here (trusted: they come from the dataset), for their
    `check`; a task whose tests do not load is a verifier error, not the answer's failure."""
    namespace: dict[str, Any] = {"__name__": "gymflow_tests"}
    try:
        exec(_compiled(source), namespace)
    except Exception as exc:
        raise VerifierError(f"the task's tests do not load: {type(exc).__name__}: {exc}") from None
    if not callable(namespace.get("check")):
        raise VerifierError("the task's tests define no check(candidate) function")
    return namespace


def run_tests(box: Sandbox, tests: dict[str, Any], entry_point: str) -> None:
    """Run the task's `check` here, never in the sandbox, against a stand-in for the entry point
    that forwards each call's arguments to the sandboxed module and returns the plain value it
    hands back. The prompt's helpers are there for the tests (HumanEval/32's `poly`), and the
    entry point's own name is the stand-in as well (HumanEval/33's test calls it by name)."""
    candidate = box.function(entry_point)
    tests[entry_point] = candidate
    tests["check"](candidate)


def _as_body(code: str) -> str:
    lines = code.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first and not first[0].isspace():
        return "\n".join(f"    {line}" if line.strip() else line for line in lines) + "\n"
    return code


@verifier(
    "code_exec",
    params=CodeExecParams,
    runs="worker",
    timeout_s=300.0,
    fields={n: DataField("text") for n in ("prompt", "test", "entry_point")},
    outlived_bound_fails=True,
    no_answer_reasons=("no_code",),  # nothing to run: an empty answer or an empty code block
    task_code=True,  # the task's tests run here: never a store's copy of them
)
def code_exec(inp: VerifyInput, params: CodeExecParams) -> Verdict:
    """Reward 1 when the extracted code passes the task's tests, run against the sandbox."""
    data = inp.task.data
    entry_point = data["entry_point"]
    code = extract_code(inp.output_text, entry_point)
    if not code.strip():
        return Verdict(0.0, {"reason": "no_code"})
    program, form = build_program(data["prompt"], code, entry_point)
    limits = SandboxLimits(
        timeout_s=params.timeout_s,
        memory_mb=params.memory_mb,
        max_processes=params.max_processes,
        max_file_mb=params.max_file_mb,
    )
    source = tests_source(data["prompt"], data["test"])
    tests = load_tests(source)
    started = time.perf_counter()
    try:
        with Sandbox(program, limits) as box:
            outcome = _outcome(box, tests, source, entry_point)
    except SandboxError as exc:
        raise VerifierError(str(exc), kind="sandbox_error") from None
    details = {"form": form, **outcome, "wall_s": round(time.perf_counter() - started, 3)}
    if box.cpu_s is not None:
        details["cpu_s"] = box.cpu_s
    if details["reason"] != "ok" and box.output_tail:
        details["stderr"] = box.output_tail
    if box.evidence:
        # Touching the harness fails the answer even when its values were right: a policy that
        # learns to look for the checker is what a training team most needs to see.
        details["tampering"], details["outcome"] = box.evidence, details["reason"]
        details["reason"] = "tampering"
        return Verdict(0.0, details, failure_kind="tampering")
    return Verdict(1.0 if details["reason"] == "ok" else 0.0, details)


def _outcome(box: Sandbox, tests: dict[str, Any], source: str, entry_point: str) -> dict[str, Any]:
    """How loading the module and running the tests against it ended: {"reason", ...}."""
    try:
        box.load()
        run_tests(box, tests, entry_point)
        if box.ended is not None:  # a test that swallowed the end still ran without its answers
            raise box.ended
    except SandboxEnded as ended:
        outcome: dict[str, Any] = {"reason": ended.reason}
        if ended.limit:
            outcome["limit"] = ended.limit
        if ended.exit_code is not None:
            outcome["exit_code"] = ended.exit_code
        return outcome
    except CandidateRaised as raised:
        info = raised.info
        reason = reason_for(info) or _CODE_REASONS.get(info.get("type"), "runtime_error")
        return {"reason": reason, **_error(info.get("type"), info.get("message"), info.get("line"))}
    except SandboxError:
        raise
    except AssertionError as exc:
        failed = _error("AssertionError", str(exc), _test_line(exc, source))
        return {"reason": "tests_failed", **failed}
    except Exception as exc:  # the tests choked on a wrong value (None where a number belongs)
        failed = _error(type(exc).__name__, str(exc), _test_line(exc, source))
        return {"reason": "runtime_error", **failed}
    return {"reason": "ok"}


def _error(error_type: Any, message: Any, line: Any) -> dict[str, Any]:
    out = {"error_type": str(error_type), "error_message": str(message or "")[:500]}
    if line:
        out["error_line"] = str(line)[:300]
    return out


def _test_line(exc: BaseException, source: str) -> str | None:
    """The tests' line that failed (the innermost frame in the tests' source)."""
    lines, line = source.splitlines(), None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == _TEST_FILE and 0 < lineno <= len(lines):
            line = lines[lineno - 1].strip()
    return line
