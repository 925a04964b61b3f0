"""Writing a run as NeMo Gym's own files: rollouts, materialized inputs and failures.

Each line is shaped to validate under NeMo Gym 0.4's typed models (its verify response: a
`NeMoGymResponseCreateParamsNonStreaming` request, a `NeMoGymResponse`, a float `reward`): the
request keeps only the Responses API fields those models allow (no `seed`), with
`parallel_tool_calls`, `tool_choice`, `tools` (function tools with `strict`); the response has
`created_at`, its own tool settings and usage with both details objects; output messages carry
ids, statuses and `annotations`. Every line has `agent_ref`, which NeMo Gym's aggregation groups
on. The task's fields sit under `task` (an object, so NeMo Gym's profiling does not average
them as metrics), with `task_id` beside it.

Scored rollouts go to the rollouts file; failed ones, and completed ones whose verification
errored, to `<stem>_failures.jsonl` (with `_ng_failure_class` and gymflow's failure kind);
every (task, rollout) the run asked for to `<stem>_materialized_inputs.jsonl`, as NeMo Gym's
`gym eval profile` reads them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gymflow.core.written import written
from gymflow.interop.nemo_read import sidecar_path
from gymflow.models.nemo_gym_shapes import nemo_request, nemo_response, usage
from gymflow.store.queries.exports import nemo_rollout_rows, nemo_task_requests
from gymflow.store.runs import max_repeats, run_info
from gymflow.store.stored_values import stored_json

#: gymflow's failure kinds as NeMo Gym failure classes (a timeout is terminal there).
FAILURE_CLASSES = {"timeout": "timeout_exceeded", "verifier_error": "transient"}
#: NeMo Gym's ResponseError codes for the failure kinds that have one.
ERROR_CODES = {"rate_limited": "rate_limit_exceeded"}


def _lines(
    con, verifier_version: str, model: str, agent_ref: dict, benchmark: dict
) -> Iterator[tuple[str, dict]]:
    """('rollout' | 'failure', line) per stored rollout, in task and repeat order."""
    cursor = nemo_rollout_rows(con, verifier_version)
    while rows := cursor.fetchmany(2_000):
        for (
            rid, task_id, repeat, task_index, data_json, _prompt, trajectory_json, status,
            failure_kind, error, incomplete, input_tokens, output_tokens, started, request_json,
            v_status, reward, v_failure,
        ) in rows:  # fmt: skip
            trajectory = stored_json(con, trajectory_json, "rollouts", rid, "trajectory_json", "[]")
            request = (
                stored_json(con, request_json, "model_calls", rid, "request_json", "{}")
                if request_json
                else {"input": trajectory[:1]}
            )
            request = nemo_request(request)
            given = request["input"]
            response = nemo_response(
                f"resp_{rid}",
                request,
                trajectory[len(given) :],
                model=model,
                created_at=float(started or 0),
                incomplete=bool(incomplete),
                usage=usage(input_tokens, output_tokens),
            )
            line = {
                "responses_create_params": request,
                "response": response,
                "_ng_task_index": task_index,
                "_ng_rollout_index": repeat,
                "agent_ref": agent_ref,
                "task_id": task_id,
                "task": stored_json(con, data_json, "tasks", task_id, "data_json", "{}"),
                "verifier_version": verifier_version,
                "gymflow_benchmark": benchmark,
            }
            scored = v_status == "ok" and reward is not None and math.isfinite(reward)
            if status == "completed" and scored:
                yield "rollout", {**line, "reward": reward}
                continue
            if status == "completed":
                # the model answered; its grading failed, is absent or is not a number: NeMo
                # Gym's `transient`
                kind = v_failure or (
                    "non_finite_reward" if v_status == "ok" else "verification_missing"
                )
                extra = {"gymflow_verification": {"status": v_status, "failure_kind": v_failure}}
            else:
                kind = failure_kind
                extra = {}
                response["status"] = "failed"
                response["error"] = {
                    "code": ERROR_CODES.get(kind, "server_error"),
                    "message": (error or kind or "")[:2000],
                }
            yield (
                "failure",
                {
                    **line,
                    "_ng_failure_class": FAILURE_CLASSES.get(
                        kind, "transient" if status == "completed" else "legitimate"
                    ),
                    "gymflow_failure_kind": kind,
                    "error_message": (error or kind or "")[:2000],
                    **extra,
                },
            )


def _materialized(con, agent_ref: dict) -> Iterator[dict]:
    """Every (task, rollout) the run asked for: its tasks times its repeats."""
    repeats = max_repeats(con) or 1
    cursor = nemo_task_requests(con)
    while rows := cursor.fetchmany(2_000):
        for task_index, task_id, data_json, prompt, request_json in rows:
            request = (
                stored_json(
                    con, request_json, "model_calls", f"{task_id}'s first", "request_json", "{}"
                )
                if request_json
                else {"input": prompt or ""}
            )
            base = {
                "responses_create_params": nemo_request(request),
                "agent_ref": agent_ref,
                "task_id": task_id,
                "task": stored_json(con, data_json, "tasks", task_id, "data_json", "{}"),
                "_ng_task_index": task_index,
            }
            for repeat in range(repeats):
                yield {**base, "_ng_rollout_index": repeat}


def write_nemo_gym(con, verifier_version: str, target: Path) -> dict[str, Any]:
    """Write `target` and its two sidecars; returns the line counts and paths."""
    run = run_info(con)
    model, harness, environment = run.model, run.harness, run.environment
    config_json, benchmark, version = run.config_json, run.benchmark, run.benchmark_version
    dataset = run.dataset_version
    # the run's protocol and rows, so that an import of this file is the same benchmark version
    # and dataset and compares with the run it came from (`gymflow.interop.nemo_gym`)
    protocol = {"name": benchmark, "version": version, "dataset_version": dataset}
    config = stored_json(con, config_json, "runs", run.run_id, "config_json", "{}")
    imported = (config if isinstance(config, dict) else {}).get("agent_ref")
    agent_ref = imported or {
        "type": "responses_api_agents",
        "name": f"gymflow_{environment or 'run'}_{harness or 'agent'}",
    }
    paths = {
        "rollout": target,
        "failure": sidecar_path(target, "_failures"),
        "materialized": sidecar_path(target, "_materialized_inputs"),
    }
    counts = dict.fromkeys(paths, 0)
    with written(*paths.values()) as staged:
        handles = {
            kind: path.open("w", encoding="utf-8") for kind, path in zip(paths, staged, strict=True)
        }
        try:
            lines = _lines(con, verifier_version, model or "unknown", agent_ref, protocol)
            for kind, line in lines:
                handles[kind].write(json.dumps(line, allow_nan=False) + "\n")
                counts[kind] += 1
            for line in _materialized(con, agent_ref):
                handles["materialized"].write(json.dumps(line, allow_nan=False) + "\n")
                counts["materialized"] += 1
        finally:
            for handle in handles.values():
                handle.close()
    return {
        "rows": counts["rollout"],
        "failures": counts["failure"],
        "materialized_inputs": counts["materialized"],
        "failures_path": str(paths["failure"]),
        "materialized_inputs_path": str(paths["materialized"]),
    }
