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

#: Answered calls read: a run talks to one model server, so a sample says which, and a
#: million-call store is not parsed whole for it.
SAMPLE = 1000


def simulated(con) -> bool:
    answered, said_simulated = con.execute(
        f"""
        SELECT count(*), count(*) FILTER (WHERE json_extract_string(response_json, '$.model') = ?)
        FROM (SELECT response_json FROM model_calls
              WHERE status = 'completed' AND response_json IS NOT NULL LIMIT {SAMPLE})
        """,
        [SIMULATED_MODEL],
    ).fetchone()
    if answered:
        return said_simulated > 0
    row = con.execute("SELECT config_json FROM runs LIMIT 1").fetchone()
    config = json.loads(row[0] or "{}") if row else {}
    model = config.get("model") if isinstance(config, dict) else None
    return isinstance(model, dict) and model.get("kind", "local") == "local"
