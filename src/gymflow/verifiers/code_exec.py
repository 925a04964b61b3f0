"""Functional correctness of generated Python: extract the code, run it with the task's tests in
the sandbox.

The answer may be a fenced block or bare code, and either a completion of the prompt (the body of
the function) or a whole function. Reward 1 only when every test passes; a timeout, a memory bomb
or a write outside the sandbox is the program failing (reward 0 with the reason), while a sandbox
that cannot run at all is a verifier error."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier
from gymflow.verifiers.sandbox import SandboxError, SandboxLimits, run_python

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
# Exceptions that mean "the code ran and gave wrong answers" or "the code is not Python".
_CODE_REASONS = {
    "AssertionError": "tests_failed",
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


def build_program(prompt: str, code: str, test: str, entry_point: str) -> tuple[str, str]:
    """The program to run and the answer's form: `function` (the code defines the entry point;
    the prompt still comes first for its imports and helpers) or `completion` (the code
    continues the prompt, re-indented when the model dropped the body's indentation)."""
    if _defines(code, entry_point):
        form, body = "function", f"{prompt}\n\n{code}"
    else:
        form, body = "completion", prompt + _as_body(code)
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n", form


def _as_body(code: str) -> str:
    lines = code.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if first and not first[0].isspace():
        return "\n".join(f"    {line}" if line.strip() else line for line in lines) + "\n"
    return code


@verifier(
    "code_exec",
    params=CodeExecParams,
    fields={n: DataField("text") for n in ("prompt", "test", "entry_point")},
)
def code_exec(inp: VerifyInput, params: CodeExecParams) -> Verdict:
    """Reward 1 when the extracted code passes the task's tests in the sandbox."""
    data = inp.task.data
    entry_point = data["entry_point"]
    code = extract_code(inp.output_text, entry_point)
    if not code.strip():
        return Verdict(0.0, {"reason": "no_code"})
    program, form = build_program(data["prompt"], code, data["test"], entry_point)
    limits = SandboxLimits(
        timeout_s=params.timeout_s,
        memory_mb=params.memory_mb,
        max_processes=params.max_processes,
        max_file_mb=params.max_file_mb,
    )
    try:
        result = run_python(program, limits)
    except SandboxError as exc:
        raise VerifierError(str(exc), kind="sandbox_error") from None
    details = {"form": form, **result.details()}
    if result.error_type in _CODE_REASONS:
        details["reason"] = _CODE_REASONS[result.error_type]
    elif not result.ok and result.reason == "exception":
        details["reason"] = "runtime_error"
    return Verdict(1.0 if result.ok else 0.0, details)
