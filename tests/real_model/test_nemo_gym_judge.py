"""Two NeMo Gym judge servers scored with a real judge: SmolLM2-135M-Instruct behind llama.cpp's
server (`chat_completions`), configured as `verifier_params.judge`. Every verdict is the
server's own reading of what the model said (a 135M model is a poor judge: what is checked is
that each reward came from its words, not whether it judged well), with each call kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.interop.test_nemo_gym_judge import judged_run, nemo_env  # noqa: F401 (fixture)
from tests.real_model.conftest import MODEL


@pytest.mark.parametrize("name", ["ng-equivalence_llm_judge", "ng-text_to_sql"])
def test_a_judge_server_scored_by_the_real_small_model(
    nemo_env,  # noqa: F811
    llama_server: str,
    prefect_api: str,
    tmp_path: Path,
    name: str,
) -> None:
    judge = {"base_url": llama_server, "model": MODEL, "kind": "chat_completions",
             "max_output_tokens": 256, "timeout_s": 300}  # fmt: skip
    env = {**nemo_env, "PREFECT_API_URL": prefect_api}
    verdicts = judged_run(tmp_path, env, judge, name)
    assert len(verdicts) == 2
    asked = 0
    for status, reward, details_json in verdicts:
        details = json.loads(details_json)
        if status == "error" and name == "ng-text_to_sql":
            # its judge prompt can outgrow SmolLM2's 2,048-token context: the judge's own
            # refusal, recorded as the verdict's failure, never a reward of 0
            assert "context_length_exceeded" in details["error"], details
            assert reward is None, reward
            continue
        assert status == "ok", details
        calls = details.get("judge_calls", [])
        assert all(c["status"] == "ok" and c["judge"] == MODEL and c["text"] for c in calls)
        asked += len(calls)
        if reward == 1.0 and name == "ng-equivalence_llm_judge":
            assert "[[A=B]]" in calls[0]["text"]  # a pass only when the judge said so
    assert asked >= 1 or name == "ng-text_to_sql"  # at least one verdict was the judge's
