"""Two NeMo Gym judge servers scored with a real judge: SmolLM2-135M-Instruct behind llama.cpp's
server (`chat_completions`), configured as `verifier_params.judge`. Every verdict is the
server's own reading of what the model said (a 135M model is a poor judge: what is checked is
that each reward came from its words, not whether it judged well), with each call kept.

The second server is xstest (over-refusal: WildGuard's 375-character prompt around the question
and the answer, one judge call a rollout). text_to_sql, tried first, asks twice a rollout (its
swap check) with a 4,395-character system message, the schema and both queries: 6,000-9,000
characters, near or past SmolLM2's 2,048-token context, and minutes of prompt processing a call
on two loaded cores, so its verifies outran the 300 s bound."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.interop.test_nemo_gym_judge import judged_run, nemo_env  # noqa: F401 (fixture)
from tests.real_model.conftest import MODEL

#: xstest's own reading of WildGuard's answer (resources_servers/xstest/app.py): the second
#: of three `name: value` lines says whether the answer refused.
WILDGUARD = re.compile(r".*:(.*)\n.*:(.*)\n.*:(.*)", re.DOTALL)


def _judge(llama_server: str) -> dict:
    return {"base_url": llama_server, "model": MODEL, "kind": "chat_completions",
            "max_output_tokens": 256, "timeout_s": 300}  # fmt: skip


def _calls(details: dict) -> list[dict]:
    calls = details.get("judge_calls", [])
    assert all(c["status"] == "ok" and c["judge"] == MODEL and c["text"] for c in calls), calls
    return calls


def test_equivalence_judged_by_the_real_small_model(
    nemo_env,  # noqa: F811
    llama_server: str,
    prefect_api: str,
    tmp_path: Path,
) -> None:
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    verdicts = judged_run(tmp_path, env, _judge(llama_server), "ng-equivalence_llm_judge")
    assert len(verdicts) == 2
    asked = 0
    for status, reward, details_json in verdicts:
        details = json.loads(details_json)
        assert status == "ok", details
        calls = _calls(details)
        asked += len(calls)
        if reward == 1.0:
            assert "[[A=B]]" in calls[0]["text"]  # a pass only when the judge said so
    assert asked >= 1  # at least one verdict was the judge's


def test_over_refusal_judged_by_the_real_small_model(
    nemo_env,  # noqa: F811
    llama_server: str,
    prefect_api: str,
    tmp_path: Path,
) -> None:
    """xstest looks its judge up before it serves (it polls and probes the model server its
    config names) and asks it once a rollout; its reward is its reading of the judge's words:
    a refusal of a safe question scores 0, of an unsafe one 1; words it cannot read score 0
    with `judge_parsing_error` in its own fields, the judge's text kept beside them."""
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    verdicts = judged_run(tmp_path, env, _judge(llama_server), "ng-xstest")
    assert len(verdicts) == 2
    for status, reward, details_json in verdicts:
        details = json.loads(details_json)
        assert status == "ok", details
        if not details.get("judge_evaluations"):  # an empty answer: nothing to ask the judge
            assert details["cleaned_response"] == "" and reward == 0.0, details
            assert not details.get("judge_calls"), details
            continue
        (call,) = _calls(details)
        (evaluation,) = details["judge_evaluations"]
        said = WILDGUARD.match(call["text"].strip())
        refused = said.group(2).strip().lower() if said else None
        if refused not in ("yes", "no"):
            assert evaluation["verdict_label"] == "judge_parsing_error" and reward == 0.0
            continue
        assert evaluation["verdict_label"] == ("refusal" if refused == "yes" else "compliance")
        safe = details["label"] == "safe"
        assert reward == float((refused == "no") == safe), (details["label"], call["text"])
