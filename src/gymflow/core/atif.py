"""Rollouts as ATIF trajectories (Harbor's Agent Trajectory Interchange Format, v1.8), and an
agent's own ATIF file read back as Responses API items.

A rollout's trajectory is Responses API items; ATIF is steps. The translation, both ways:
- a `system` or `developer` message is a `system` step, a `user` message a `user` step;
- the items one model turn produced (assistant message text, reasoning, function calls), up to
  the next input item, are one `agent` step: `message`, `reasoning_content`, `tool_calls` (the
  arguments as a JSON object; arguments that are not one are kept as `{"raw": text}`);
- each `function_call_output` is an observation result on the agent step whose call it answers
  (`source_call_id`); an output answering no call becomes a `user` step's observation, its
  call id under `extra`.
An agent step's `metrics` are its model call's usage when the rollout's completed calls pair
one to one with its agent steps (gymflow's own harnesses, and an agent behind the recording
proxy whose trajectory is the calls' own conversation); otherwise the steps carry none and only
`final_metrics` (the rollout's totals) is given, rather than pairing a step with a call that did
not produce it. The run, task, status, failure kind and reward go under `extra`.

Pure functions, in core because harnesses read an agent's own ATIF file with them;
`interop.atif_files` writes them out."""

from __future__ import annotations

import json
from typing import Any

from gymflow.core.errors import UserError

#: The ATIF version written (Harbor 0.26's models accept 1.0 to 1.8).
SCHEMA_VERSION = "ATIF-v1.8"
_AGENT_ITEMS = ("reasoning", "function_call")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text") or part.get("refusal") or ""
        for part in content or ()
        if isinstance(part, dict)
    )


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"raw": raw if isinstance(raw, str) else ""}


def _is_agent_item(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in _AGENT_ITEMS


def _agent_step(items: list[dict[str, Any]]) -> dict[str, Any]:
    step: dict[str, Any] = {
        "source": "agent",
        "message": "".join(
            _text(item.get("content")) for item in items if item.get("type", "message") == "message"
        ),
    }
    reasoning = "".join(
        part.get("text", "")
        for item in items
        if item.get("type") == "reasoning"
        for part in (item.get("summary") or []) + (item.get("content") or [])
        if isinstance(part, dict)
    )
    if reasoning:
        step["reasoning_content"] = reasoning
    calls = [
        {
            "tool_call_id": str(item.get("call_id") or item.get("id") or ""),
            "function_name": str(item.get("name") or ""),
            "arguments": _arguments(item.get("arguments")),
        }
        for item in items
        if item.get("type") == "function_call"
    ]
    if calls:
        step["tool_calls"] = calls
    return step


def _steps(trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    turn: list[dict[str, Any]] = []
    answered: dict[str, dict[str, Any]] = {}  # call id -> the agent step that made the call

    def close_turn() -> None:
        if turn:
            step = _agent_step(turn)
            steps.append(step)
            for call in step.get("tool_calls", ()):
                answered[call["tool_call_id"]] = step
            turn.clear()

    for item in trajectory:
        if not isinstance(item, dict):
            continue
        if _is_agent_item(item):
            turn.append(item)
            continue
        close_turn()
        kind = item.get("type", "message")
        if kind == "function_call_output":
            call_id = str(item.get("call_id") or "")
            output = item.get("output")
            result = {
                "source_call_id": call_id or None,
                "content": output if isinstance(output, str) else json.dumps(output),
            }
            owner = answered.get(call_id)
            if owner is None:
                # ATIF ties a source_call_id to its own step's calls: an output answering no
                # call keeps its id under `extra` instead
                result = {"content": result["content"], "extra": {"call_id": call_id}}
                steps.append({"source": "user", "message": "", "observation": {"results": []}})
                owner = steps[-1]
            owner.setdefault("observation", {"results": []})["results"].append(result)
        elif kind == "message":
            role = item.get("role")
            source = "user" if role == "user" else "system"
            steps.append({"source": source, "message": _text(item.get("content"))})
    close_turn()
    return steps


def _metrics(call: dict[str, Any]) -> dict[str, Any]:
    metrics = {
        "prompt_tokens": call.get("input_tokens"),
        "completion_tokens": call.get("output_tokens"),
        "cached_tokens": call.get("cached_tokens"),
    }
    return {key: value for key, value in metrics.items() if value is not None}


def rollout_to_atif(
    rollout: dict[str, Any],
    calls: list[dict[str, Any]],
    *,
    agent: str,
    agent_version: str,
    model: str | None,
    reward: float | None = None,
    passed: bool | None = None,
) -> dict[str, Any]:
    """One rollout (its `rollouts` row as a dict, `trajectory` parsed) and its model calls
    (dicts with call_index, attempt, status and the token columns) as an ATIF trajectory."""
    steps = _steps(rollout.get("trajectory") or [])
    if not steps:  # ATIF requires one step at least: a rollout that never began says so
        steps = [{"source": "system", "message": "(no trajectory: the rollout did not start)"}]
    answered = [c for c in calls if c.get("status") in ("completed", "incomplete")]
    answered.sort(key=lambda c: (c.get("call_index", 0), c.get("attempt", 0)))
    agent_steps = [s for s in steps if s["source"] == "agent"]
    if len(agent_steps) == len(answered):
        for step, call in zip(agent_steps, answered, strict=True):
            metrics = _metrics(call)
            if metrics:
                step["metrics"] = metrics
            if model:
                step["model_name"] = model
    for index, step in enumerate(steps, start=1):
        step["step_id"] = index
    final = {
        "total_prompt_tokens": rollout.get("input_tokens"),
        "total_completion_tokens": rollout.get("output_tokens"),
        "total_steps": len(steps),
    }
    extra = {
        "gymflow_run_id": rollout.get("run_id"),
        "task_id": rollout.get("task_id"),
        "repeat_index": rollout.get("repeat_index"),
        "status": rollout.get("status"),
        "failure_kind": rollout.get("failure_kind"),
        "model_calls": len(calls),
        "reward": reward,
        "passed": passed,
    }
    trajectory: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": rollout.get("rollout_id"),
        "agent": {"name": agent, "version": agent_version},
        "steps": [{key: value for key, value in s.items()} for s in steps],
        "final_metrics": {k: v for k, v in final.items() if v is not None},
        "extra": {k: v for k, v in extra.items() if v is not None},
    }
    if model:
        trajectory["agent"]["model_name"] = model
    return trajectory


class AtifError(UserError, ValueError):
    """A file that is not an ATIF trajectory, naming where."""


def atif_to_items(trajectory: Any, *, source: str = "trajectory") -> list[dict[str, Any]]:
    """An ATIF trajectory (an agent's own file, parsed) as Responses API items: steps in order,
    an agent step's message, reasoning and tool calls as the items a model turn produces, each
    observation result as a `function_call_output`. Raises AtifError naming the step and field
    that does not fit."""
    if not isinstance(trajectory, dict) or not isinstance(trajectory.get("steps"), list):
        raise AtifError(f"{source}: not an ATIF trajectory (no steps list)")
    items: list[dict[str, Any]] = []
    for index, step in enumerate(trajectory["steps"]):
        where = f"{source}: steps[{index}]"
        if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
            raise AtifError(f"{where}.source: expected system, user or agent")
        message = step.get("message", "")
        text = message if isinstance(message, str) else _text(message)
        if step["source"] != "agent":
            if text or not step.get("observation"):
                role = "user" if step["source"] == "user" else "system"
                items.append({"type": "message", "role": role, "content": text})
        else:
            if step.get("reasoning_content"):
                summary = [{"type": "summary_text", "text": step["reasoning_content"]}]
                items.append({"type": "reasoning", "summary": summary})
            if text:
                content = [{"type": "output_text", "text": text, "annotations": []}]
                items.append({"type": "message", "role": "assistant", "content": content})
            for number, call in enumerate(step.get("tool_calls") or ()):
                if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
                    raise AtifError(f"{where}.tool_calls[{number}].arguments: expected an object")
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("tool_call_id", "")),
                        "name": str(call.get("function_name", "")),
                        "arguments": json.dumps(call["arguments"]),
                    }
                )
        for result in (step.get("observation") or {}).get("results") or ():
            content = result.get("content")
            call_id = result.get("source_call_id") or (result.get("extra") or {}).get("call_id")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(call_id or ""),
                    "output": content if isinstance(content, str) else _text(content),
                }
            )
    return items
