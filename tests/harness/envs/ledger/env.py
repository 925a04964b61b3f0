"""A three-turn tool environment used by the harness tests and bench/tool_loop.py."""

from __future__ import annotations

from typing import Any, ClassVar

from gymflow.core.protocols import ToolError
from gymflow.core.tasks import Task, ToolCall
from gymflow.environments.base import Environment
from gymflow.environments.resources import ResourcesServer
from gymflow.models.responses import function_tool


def _deposit(state: dict[str, Any], arguments: dict[str, Any]) -> dict[str, int]:
    amount = arguments["amount"]
    if amount <= 0:
        raise ToolError(f"amount must be positive, got {amount}")
    state["balance"] += amount
    return {"balance": state["balance"]}


def _balance(state: dict[str, Any], arguments: dict[str, Any]) -> dict[str, int]:
    return {"balance": state["balance"]}


class LedgerServer(ResourcesServer):
    tool_schemas: ClassVar[dict[str, dict[str, Any]]] = {
        "deposit": function_tool(
            "deposit",
            "Add a positive amount to the ledger.",
            {
                "type": "object",
                "properties": {"amount": {"type": "integer"}},
                "required": ["amount"],
                "additionalProperties": False,
            },
        ),
        "balance": function_tool(
            "balance", "Read the ledger's balance.", {"type": "object", "properties": {}}
        ),
    }

    def handlers(self):
        return {"deposit": _deposit, "balance": _balance}

    def initial_state(self, task: Task) -> dict[str, Any]:
        return {"balance": 0}


def make_task(index: int) -> Task:
    first, second = 3 + index, 10 * (index + 1)
    total = first + second
    return Task(
        task_id=f"ledger-{index:03d}",
        inputs={"first": first, "second": second},
        data={"answer": total},
        reference=f"The balance is {total}.\nAnswer: {total}",
        distractor=f"The balance is {first}.\nAnswer: {first}",
        reference_actions=(
            (ToolCall("deposit", {"amount": first}), ToolCall("deposit", {"amount": second})),
            (ToolCall("balance", {}),),
        ),
        # Every third task's wrong plan stops early; the others get one derived by the policy.
        distractor_actions=((ToolCall("deposit", {"amount": first}),),) if index % 3 == 0 else (),
    )


class LedgerEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        return [make_task(i) for i in range(self.manifest.splits[split].size or 0)]

    def resources_server(self, verifier_params: dict[str, Any] | None = None) -> LedgerServer:
        return LedgerServer(self, verifier_params)
