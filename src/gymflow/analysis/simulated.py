"""Whether a simulated model answered a run, decided once from what the store holds; every
surface (CLI, reports, compare, study, Prefect artifacts) reads this answer.

The simulated policy server names itself in every answer's `model` field (`SIMULATED_MODEL`),
however it was reached: `model.kind: local`, or `gym serve model` on a port behind the
`responses` or `chat_completions` kind, or a file imported from a tool that called it. So the
answers decide. A local run with no answer stored (every call failed) is simulated too: the
config says which server it started."""

from __future__ import annotations

import json

from gymflow.simulated import SIMULATED_MODEL
from gymflow.store.queries.model_calls import answered_by
from gymflow.store.runs import config_json

#: Answered calls read: a run talks to one model server, so a sample says which, and a
#: million-call store is not parsed whole for it.
SAMPLE = 1000


def simulated(con) -> bool:
    answered, said_simulated = answered_by(con, SIMULATED_MODEL, SAMPLE)
    if answered:
        return said_simulated > 0
    config = json.loads(config_json(con) or "{}")
    model = config.get("model") if isinstance(config, dict) else None
    return isinstance(model, dict) and model.get("kind", "local") == "local"
