"""Fault-injection fixture: a lookup tool whose server is down for tool calls 8-17 of a run,
and a verifier that raises or hangs on the tasks that ask it to."""

from __future__ import annotations

import itertools
import time
from typing import Any, ClassVar

from pydantic import BaseModel

from gymflow.environments.base import Environment, Task, ToolCall
from gymflow.environments.resources import ResourcesServer
from gymflow.models.responses import function_tool
from gymflow.verifiers.base import Verdict, verifier

OUTAGE = range(8, 18)


class NoParams(BaseModel):
    pass


@verifier("faultlab_answer", params=NoParams)
def faultlab_answer(inp, params):
    mode = inp.task.data["mode"]
    if mode == "raise":
        raise RuntimeError("checker crashed on purpose")
    if mode == "hang":
        time.sleep(3600)
    return Verdict(1.0 if inp.output_text.endswith(f"Answer: {inp.task.data['answer']}") else 0.0)


class LabServer(ResourcesServer):
    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {
        "lookup": function_tool(
            "lookup",
            "Read an item's value.",
            {"type": "object", "properties": {"key": {"type": "integer"}}, "required": ["key"]},
        )
    }

    def __init__(self, env, verifier_params=None):
        super().__init__(env, verifier_params)
        self.calls = itertools.count()

    def handlers(self):
        return {"lookup": self.lookup}

    def lookup(self, state, arguments):
        if next(self.calls) in OUTAGE:
            raise ConnectionResetError("resources server restarting")
        return {"value": arguments["key"] * 7}


class FaultLab(Environment):
    def resources_server(self, verifier_params=None):
        return LabServer(self, verifier_params)

    def generate(self, split):
        modes = {3: "raise", 7: "hang"}
        return [
            Task(
                task_id=f"lab-{i:03d}",
                inputs={"key": i},
                data={"answer": i * 7, "mode": modes.get(i % 10, "ok")},
                reference=f"Answer: {i * 7}",
                distractor=f"Answer: {i * 7 + 1}",
                reference_actions=((ToolCall("lookup", {"key": i}),),),
            )
            for i in range(self.manifest.splits[split].size)
        ]
