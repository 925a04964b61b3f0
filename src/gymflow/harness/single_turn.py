"""One model call; the answer is the assistant's text."""

from __future__ import annotations

from gymflow.core.config import HarnessConfig
from gymflow.core.protocols import Resources
from gymflow.core.tasks import Task
from gymflow.harness.base import Episode, harness, opening_items
from gymflow.models.client import ResponsesClient
from gymflow.models.responses import output_text


@harness("single_turn", for_data=True)
async def single_turn(
    *,
    client: ResponsesClient,
    server: Resources,
    session_id: str,
    task: Task,
    prompt: str,
    seed: int | None,
    config: HarnessConfig,
) -> Episode:
    items = opening_items(prompt, config, task)
    tools = server.tools_for(task) or None
    outcome = await client.create(items, tools=tools, call_index=0, seed=seed)
    episode = Episode(trajectory=items, calls=outcome.calls, num_turns=1)
    if outcome.error is not None:
        episode.failure_kind, episode.error = outcome.error.kind, str(outcome.error)
        return episode
    output = outcome.response["output"]
    episode.trajectory = [*items, *output]
    episode.output_text = output_text(output)
    episode.incomplete = outcome.response.get("status") == "incomplete"
    return episode
