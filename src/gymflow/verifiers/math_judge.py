"""An LLM judge for math answers: asks a model server (Responses API, through gymflow's
`ResponsesClient`) whether the response's boxed answer is equivalent to the gold answer.

Optional, for answers that symbolic comparison cannot settle (units, words, unusual notation). By
default math-verify is asked first and the judge only when it does not prove equivalence, which
saves judge calls on the easy majority. The judge prompt (a Jinja template) and the score
threshold are parameters. A judge that cannot be reached, errs, or replies without a score is a
verification error of kind `judge_failed`, never a reward of 0."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.core.credentials import ApiKeyEnv, ServerUrl
from gymflow.verifiers.base import DataField, Verdict, VerifierError, VerifyInput, verifier
from gymflow.verifiers.math_answer import (
    NO_ANSWER_REASONS,
    MathAnswerParams,
    candidate,
    equivalent,
    last_boxed,
    parse_answer,
    parse_gold,
)

DEFAULT_PROMPT = """\
You are grading a math answer. Decide whether the candidate answer is mathematically equivalent
to the reference answer (same value or set of values; form and notation do not matter).

Problem: {{ question }}
Reference answer: {{ expected }}
Candidate answer: {{ answer }}

Reply with one line of the form `Score: S`, where S is a number from 0 to 1: your probability
that the two answers are equivalent."""

_SCORE = re.compile(r"score\s*[:=]\s*\**\s*([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\s*([01](?:\.\d+)?|\.\d+)\s*")


class MathJudgeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    # The parameters are stored with the verifier version and shown in reports: no key in them.
    base_url: ServerUrl = Field(
        description="The judge's model server, e.g. http://127.0.0.1:8000/v1"
    )
    model: str = Field("judge", description="Model name sent to the judge server.")
    kind: Literal["responses", "chat_completions"] = "responses"
    api_key_env: ApiKeyEnv | None = Field(None, description="Environment variable holding the key.")
    prompt_template: str = Field(
        DEFAULT_PROMPT, description="Jinja template over question, expected and answer."
    )
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="Scores at or above it pass.")
    verify_first: bool = Field(
        True, description="Pass without asking the judge when math-verify proves equivalence."
    )
    require_boxed: bool = True
    timeout_s: float = Field(60.0, gt=0.0)
    max_retries: int = Field(2, ge=0, le=10)
    max_output_tokens: int = Field(256, ge=1)


def read_score(reply: str) -> float | None:
    """The judge's score: its `Score: S` line, or a reply that is only a number; None if absent,
    outside [0, 1], or given as two different scores. A judge that quotes the candidate's answer
    quotes any `Score: 1` the answer wrote: whichever score was taken, first or last, an answer
    could choose its own."""
    matches = {float(raw) for raw in _SCORE.findall(reply)}
    if len(matches) > 1:
        return None
    raw = str(matches.pop()) if matches else None
    if raw is None:
        bare = _BARE_NUMBER.fullmatch(reply)
        raw = bare.group(1) if bare else None
    if raw is None:
        return None
    score = float(raw)
    return score if 0.0 <= score <= 1.0 else None


async def ask_judge(prompt: str, params: MathJudgeParams) -> str:
    """The judge's reply text; raises VerifierError(judge_failed) on any failure."""
    from gymflow.core.config import ModelConfig, Sampling
    from gymflow.models.client import ResponsesClient
    from gymflow.models.responses import output_text, user_message

    config = ModelConfig(
        kind=params.kind,
        base_url=params.base_url,
        name=params.model,
        api_key_env=params.api_key_env,
        timeout_s=params.timeout_s,
        max_retries=params.max_retries,
        backoff_s=0.2,
    )
    sampling = Sampling(temperature=0.0, max_output_tokens=params.max_output_tokens, seed=0)
    async with ResponsesClient(config, params.base_url, sampling, concurrency=1) as client:
        outcome = await client.create([user_message(prompt)], tools=None, call_index=0, seed=0)
    if outcome.error is not None:
        raise VerifierError(
            f"judge call failed ({outcome.error.kind}): {outcome.error}", kind="judge_failed"
        )
    return output_text(outcome.response["output"])


def _run(coro) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called on an event loop's own thread: a nested loop needs a thread of its own.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@verifier(
    "math_judge",
    params=MathJudgeParams,
    runs="threads",
    timeout_s=300.0,
    fields={"answer": DataField("scalar"), "question": DataField("text", required=False)},
    no_answer_reasons=NO_ANSWER_REASONS,  # the boxed answer is read as math_answer reads it
)
def math_judge(inp: VerifyInput, params: MathJudgeParams) -> Verdict:
    """Reward 1 when an LLM judge scores the boxed answer equivalent (at or above threshold)."""
    from gymflow.core.prompts import PromptError, render_prompt

    expected = inp.task.data["answer"]
    answer_params = MathAnswerParams(require_boxed=params.require_boxed)
    text, problem = candidate(inp.output_text, answer_params)
    if text is None:
        return Verdict(0.0, {"reason": problem, "expected": expected})
    extracted = last_boxed(inp.output_text) or text
    details: dict[str, Any] = {"extracted": extracted, "expected": expected}
    if params.verify_first:
        answer = parse_answer(text)
        if answer and equivalent(parse_gold(expected), answer, answer_params):
            return Verdict(1.0, {**details, "reason": "math_verify_match"})
    values = {
        "question": inp.task.data.get("question", ""),
        "expected": expected,
        "answer": extracted,
    }
    try:
        prompt = render_prompt(params.prompt_template, values)
    except PromptError as exc:
        raise VerifierError(f"judge prompt: {exc}", kind="judge_failed") from None
    reply = _run(ask_judge(prompt, params))
    score = read_score(reply)
    if score is None:
        raise VerifierError(
            f"judge reply has no single score in [0, 1]: {reply[:300]!r}", "judge_failed"
        )
    passed = score >= params.threshold
    return Verdict(
        1.0 if passed else 0.0,
        {
            **details,
            "reason": "judge_equivalent" if passed else "judge_not_equivalent",
            "score": score,
            "threshold": params.threshold,
            "judge_reply": reply[:500],
        },
    )
