"""Call the model, run its tool calls on the resources server, feed the results back; repeat.

A rollout ends when a turn makes no tool calls (its text is the answer), when the response is
incomplete, when the model call fails, or after `max_turns` model calls. Hitting `max_turns` is a
harness outcome, not a failure: the rollout is still verified, and `counters["max_turns_reached"]`
says it happened. Every reasoning item the model returned stays in the conversation, so the server
gets it back on the next turn."""

from __future__ import annotations

import asyncio
from typing import Any

from gymflow.core.config import HarnessConfig
from gymflow.core.errors import RuntimeFailure
from gymflow.core.protocols import Resources, ResourcesUnavailable, ToolError, ToolServerError
from gymflow.core.tasks import Task
from gymflow.harness.base import Episode, harness, opening_items
from gymflow.harness.tool_arguments import MalformedArguments, parse_arguments
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import function_calls, output_text

#: Counter names a tool-loop episode reports (all present, zero when nothing happened).
COUNTERS = (
    "tool_calls",
    "tool_errors",
    "tool_server_errors",
    "malformed_tool_calls",
    "unknown_tool_calls",
    "parallel_turns",
    "max_turns_reached",
)


class ToolServerFailure(RuntimeFailure):
    """A tool crashed (not a ToolError): the resources server failed, not the model. `kind` is
    the rollout's failure kind: `tool_error`, or `resources_unavailable` for a served resources
    server that could not be reached (a new attempt may settle it)."""

    def __init__(self, message: str, kind: str = "tool_error") -> None:
        super().__init__(message)
        self.kind = kind


def _output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


#: At most this many of one turn's tool calls run at once: an 8 MiB reply can carry ~100,000
#: calls, and each holds a request to the resources server (on a served one, a socket).
MAX_CONCURRENT_TOOL_CALLS = 32


async def _run_call(
    server: Resources,
    session_id: str,
    call: dict[str, Any],
    schemas: dict[str, dict[str, Any]],
    episode: Episode,
) -> dict[str, Any]:
    counters = episode.counters
    name, call_id = call.get("name", ""), call.get("call_id", "")
    counters["tool_calls"] += 1
    schema = schemas.get(name)
    if schema is None:
        counters["unknown_tool_calls"] += 1
        counters["tool_errors"] += 1
        known = ", ".join(sorted(schemas)) or "none"
        return _output(call_id, f"error: unknown tool {name!r} (tools: {known})")
    try:
        arguments = parse_arguments(call.get("arguments"), schema.get("parameters"))
    except MalformedArguments as exc:
        counters["malformed_tool_calls"] += 1
        counters["tool_errors"] += 1
        return _output(call_id, f"error: malformed arguments for {name}: {exc}")
    try:
        result = await server.call_tool(session_id, name, arguments)
    except ToolServerError as exc:  # its answer is the tool's output; the failure is kept
        counters["tool_errors"] += 1
        counters["tool_server_errors"] += 1
        # the server's log is one: told once, with the first failure
        said = str(exc) if not episode.tool_failures else str(exc).splitlines()[0]
        episode.tool_failures.append(said)
        return _output(call_id, exc.model_output())
    except ToolError as exc:
        counters["tool_errors"] += 1
        return _output(call_id, exc.model_output())
    except ResourcesUnavailable as exc:
        raise ToolServerFailure(str(exc), ResourcesUnavailable.kind) from exc
    except Exception as exc:
        raise ToolServerFailure(f"tool {name!r} crashed: {type(exc).__name__}: {exc}") from exc
    return _output(call_id, result)


@harness("tool_loop", for_data=True)
async def tool_loop(
    *,
    client: ResponsesClient,
    server: Resources,
    session_id: str,
    task: Task,
    prompt: str,
    seed: int | None,
    config: HarnessConfig,
) -> Episode:
    tools = server.tools_for(task)
    schemas = {tool["name"]: tool for tool in tools if tool.get("type") == "function"}
    items = opening_items(prompt, config, task)
    episode = Episode(trajectory=items, counters=dict.fromkeys(COUNTERS, 0))
    for turn in range(config.max_turns):
        outcome = await client.create(items, tools=tools or None, call_index=turn, seed=seed)
        episode.calls.extend(outcome.calls)
        episode.num_turns = turn + 1
        if outcome.error is not None:
            episode.failure_kind, episode.error = outcome.error.kind, str(outcome.error)
            return episode
        output = outcome.response["output"]
        items.extend(output)
        episode.output_text = output_text(output)
        if outcome.response.get("status") == "incomplete":
            episode.incomplete = True
            return episode
        calls = function_calls(output)
        if not calls:
            return episode
        if len(calls) > 1:
            episode.counters["parallel_turns"] += 1
        try:
            items.extend(await _run_turn(server, session_id, calls, schemas, episode))
        except ToolServerFailure as exc:
            episode.failure_kind, episode.error = exc.kind, str(exc)
            return episode
    episode.counters["max_turns_reached"] = 1
    return episode


async def _run_turn(
    server: Resources,
    session_id: str,
    calls: list[dict[str, Any]],
    schemas: dict[str, dict[str, Any]],
    episode: Episode,
) -> list[dict[str, Any]]:
    """One turn's calls, concurrently; a crashed tool cancels its siblings before the session
    closes, instead of leaving them running against it."""
    if len(calls) == 1:
        return [await _run_call(server, session_id, calls[0], schemas, episode)]
    slots = asyncio.Semaphore(MAX_CONCURRENT_TOOL_CALLS)

    async def bounded(call: dict[str, Any]) -> dict[str, Any]:
        async with slots:
            return await _run_call(server, session_id, call, schemas, episode)

    try:
        async with asyncio.TaskGroup() as group:
            running = [group.create_task(bounded(call)) for call in calls]
    except* ToolServerFailure as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in running]
