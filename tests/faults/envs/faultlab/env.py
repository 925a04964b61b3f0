"""Fault-injection fixture: a lookup tool whose server is down for tool calls 8-17 of a run,
and a verifier that raises or hangs (spinning) on the tasks that ask it to."""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.base import Environment
from gymflow.environments.resources import ResourcesServer
from gymflow.models.responses import function_tool
from gymflow.verifiers.base import Verdict, verifier

OUTAGE = range(8, 18)
ANSWER = re.compile(r"Answer: (-?\d+)$")


class LabParams(BaseModel):
    tolerance: int = 0  # an answer this far off still passes (reverify sets it)


@verifier("faultlab_answer", params=LabParams, runs="worker", timeout_s=1.0)
def faultlab_answer(inp, params):
    mode = inp.task.data["mode"]
    if mode == "raise" and not os.environ.get("FAULTLAB_FIXED"):  # the checker's bug, fixed
        raise RuntimeError("checker crashed on purpose")
    if mode == "hang":
        # Leave word of which process hangs, so the test can check it was killed; then spin,
        # burning a core, the worst kind of hang.
        if pid_dir := os.environ.get("FAULTLAB_PID_DIR"):
            (Path(pid_dir) / f"{os.getpid()}-{time.monotonic_ns()}").touch()
        while True:
            pass
    found = ANSWER.search(inp.output_text)
    off = abs(int(found[1]) - inp.task.data["answer"]) if found else None
    return Verdict(1.0 if off is not None and off <= params.tolerance else 0.0)


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
