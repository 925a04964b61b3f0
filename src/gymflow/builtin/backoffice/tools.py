"""The back office's tools: real logic over one session's state (products, customers, orders,
outbox). Each handler takes (state, arguments), changes the state in place and returns what the
model sees; bad input raises ToolError, whose message the model reads as the tool's output.

State shape (plain JSON, so it can be stored, diffed and shown in a report):
    products:  {sku: {name, price, stock}}
    customers: {customer_id: {name, email}}
    orders:    {order_id: {customer_id, items: [{sku, quantity}], total, status}}
    outbox:    [{to, subject, body}]
    next_order: int (the number of the next order id)"""

from __future__ import annotations

import re
from typing import Any

from gymflow.core.protocols import ToolError
from gymflow.models.responses import function_tool

State = dict[str, Any]
STATUSES = ("pending", "shipped", "cancelled")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+$")


def _text(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"'{key}' must be a non-empty string")
    return value.strip()


def _count(arguments: dict[str, Any], key: str) -> int:
    value = arguments.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError(f"'{key}' must be a whole number of at least 1, got {value!r}")
    return value


def _order(state: State, order_id: str) -> dict[str, Any]:
    if order_id not in state["orders"]:
        raise ToolError(f"no order {order_id!r}")
    return state["orders"][order_id]


def _order_view(order_id: str, order: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": order_id, **order}


def find_customer(state: State, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    name = _text(arguments, "name").lower()
    return [
        {"customer_id": cid, **customer}
        for cid, customer in state["customers"].items()
        if name in customer["name"].lower()
    ]


def search_products(state: State, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    query = str(arguments.get("query") or "").strip().lower()
    max_stock = arguments.get("max_stock")
    if max_stock is not None and (isinstance(max_stock, bool) or not isinstance(max_stock, int)):
        raise ToolError(f"'max_stock' must be a whole number, got {max_stock!r}")
    return [
        {"sku": sku, **product}
        for sku, product in state["products"].items()
        if query in product["name"].lower() and (max_stock is None or product["stock"] <= max_stock)
    ]


def get_order(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    order_id = _text(arguments, "order_id")
    return _order_view(order_id, _order(state, order_id))


def list_orders(state: State, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    customer_id = _text(arguments, "customer_id")
    if customer_id not in state["customers"]:
        raise ToolError(f"no customer {customer_id!r}")
    status = arguments.get("status")
    if status is not None and status not in STATUSES:
        raise ToolError(f"'status' must be one of {', '.join(STATUSES)}")
    return [
        _order_view(oid, order)
        for oid, order in state["orders"].items()
        if order["customer_id"] == customer_id and status in (None, order["status"])
    ]


def create_order(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    customer_id = _text(arguments, "customer_id")
    if customer_id not in state["customers"]:
        raise ToolError(f"no customer {customer_id!r}")
    items = arguments.get("items")
    if not isinstance(items, list) or not items:
        raise ToolError("'items' must be a non-empty list of {sku, quantity}")
    wanted: dict[str, int] = {}
    for item in items:
        if not isinstance(item, dict):
            raise ToolError("each item must be an object with 'sku' and 'quantity'")
        sku = _text(item, "sku")
        if sku not in state["products"]:
            raise ToolError(f"no product {sku!r}")
        wanted[sku] = wanted.get(sku, 0) + _count(item, "quantity")
    for sku, quantity in wanted.items():  # check everything before changing anything
        stock = state["products"][sku]["stock"]
        if quantity > stock:
            raise ToolError(f"only {stock} of {sku} in stock, {quantity} requested")
    for sku, quantity in wanted.items():
        state["products"][sku]["stock"] -= quantity
    order_id = f"O-{state['next_order']}"
    state["next_order"] += 1
    total = round(sum(state["products"][s]["price"] * q for s, q in wanted.items()), 2)
    state["orders"][order_id] = {
        "customer_id": customer_id,
        "items": [{"sku": s, "quantity": q} for s, q in wanted.items()],
        "total": total,
        "status": "pending",
    }
    return {"order_id": order_id, "total": total, "status": "pending"}


def cancel_order(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    order_id = _text(arguments, "order_id")
    order = _order(state, order_id)
    if order["status"] != "pending":
        raise ToolError(
            f"order {order_id} is {order['status']}; only pending orders can be cancelled"
        )
    for item in order["items"]:
        state["products"][item["sku"]]["stock"] += item["quantity"]
    order["status"] = "cancelled"
    return {"order_id": order_id, "status": "cancelled", "restocked": order["items"]}


def ship_order(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    order_id = _text(arguments, "order_id")
    order = _order(state, order_id)
    if order["status"] != "pending":
        raise ToolError(f"order {order_id} is {order['status']}; only pending orders can ship")
    order["status"] = "shipped"
    return {"order_id": order_id, "status": "shipped"}


def restock(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    sku = _text(arguments, "sku")
    if sku not in state["products"]:
        raise ToolError(f"no product {sku!r}")
    state["products"][sku]["stock"] += _count(arguments, "quantity")
    return {"sku": sku, "stock": state["products"][sku]["stock"]}


def send_email(state: State, arguments: dict[str, Any]) -> dict[str, Any]:
    to = _text(arguments, "to")
    if not _EMAIL.match(to):
        raise ToolError(f"{to!r} is not an email address")
    email = {"to": to, "subject": _text(arguments, "subject"), "body": _text(arguments, "body")}
    state["outbox"].append(email)
    return {"sent": True, "outbox_size": len(state["outbox"])}


HANDLERS = {
    "find_customer": find_customer,
    "search_products": search_products,
    "get_order": get_order,
    "list_orders": list_orders,
    "create_order": create_order,
    "cancel_order": cancel_order,
    "ship_order": ship_order,
    "restock": restock,
    "send_email": send_email,
}

_STRING = {"type": "string"}
_ID = {"type": "string", "description": "e.g. O-1004"}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "find_customer": function_tool(
        "find_customer",
        "Find customers whose name contains the given text (case-insensitive).",
        _object({"name": _STRING}, ["name"]),
    ),
    "search_products": function_tool(
        "search_products",
        "List products whose name contains `query` (all when empty), optionally only those with "
        "at most `max_stock` units in stock.",
        _object({"query": _STRING, "max_stock": {"type": "integer"}}, []),
    ),
    "get_order": function_tool(
        "get_order", "Show one order.", _object({"order_id": _ID}, ["order_id"])
    ),
    "list_orders": function_tool(
        "list_orders",
        "List a customer's orders, optionally only those with the given status.",
        _object(
            {"customer_id": _STRING, "status": {"type": "string", "enum": list(STATUSES)}},
            ["customer_id"],
        ),
    ),
    "create_order": function_tool(
        "create_order",
        "Place a pending order for a customer; takes the items out of stock.",
        _object(
            {
                "customer_id": _STRING,
                "items": {
                    "type": "array",
                    "items": _object(
                        {"sku": _STRING, "quantity": {"type": "integer", "minimum": 1}},
                        ["sku", "quantity"],
                    ),
                },
            },
            ["customer_id", "items"],
        ),
    ),
    "cancel_order": function_tool(
        "cancel_order",
        "Cancel a pending order and put its items back in stock.",
        _object({"order_id": _ID}, ["order_id"]),
    ),
    "ship_order": function_tool(
        "ship_order", "Mark a pending order as shipped.", _object({"order_id": _ID}, ["order_id"])
    ),
    "restock": function_tool(
        "restock",
        "Add units of a product to stock.",
        _object(
            {"sku": _STRING, "quantity": {"type": "integer", "minimum": 1}}, ["sku", "quantity"]
        ),
    ),
    "send_email": function_tool(
        "send_email",
        "Send an email.",
        _object({"to": _STRING, "subject": _STRING, "body": _STRING}, ["to", "subject", "body"]),
    ),
}
