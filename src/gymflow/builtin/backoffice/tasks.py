"""Back-office tasks generated from a fixed seed: a small shop's state, a goal, and the plans.

Each task is built by playing its reference plan on the tools themselves: the expected final
state is what the plan leaves behind, so it can never disagree with the tool logic, and a plan
that a tool refuses is redrawn. The distractor plan is the reference with one mistake a model
makes (a wrong tool, a wrong argument, or stopping early); it is kept only if it really ends in a
different state."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymflow.builtin.backoffice.tools import HANDLERS, State
from gymflow.core.protocols import ToolError
from gymflow.core.tasks import Task, ToolCall

SEED = 20261130
COMPANY = "Larkspur Home Goods"

PRODUCTS = (
    ("Blue Ceramic Mug", 12.5),
    ("Oak Cutting Board", 34.0),
    ("Linen Tea Towel", 9.0),
    ("Cast Iron Skillet", 48.0),
    ("Glass Storage Jar", 7.5),
    ("Copper Kettle", 62.0),
    ("Wool Throw Blanket", 89.0),
    ("Bamboo Utensil Set", 15.0),
    ("Stoneware Bowl", 11.0),
    ("Herb Planter", 24.0),
    ("Beeswax Candle", 8.5),
    ("Enamel Colander", 27.0),
)
CUSTOMERS = (
    "Ada Lovelace",
    "Grace Hopper",
    "Alan Turing",
    "Katherine Johnson",
    "Edsger Dijkstra",
    "Barbara Liskov",
    "Donald Knuth",
    "Frances Allen",
    "John McCarthy",
    "Radia Perlman",
)

Plan = list[list[ToolCall]]


@dataclass
class Draft:
    goal: str
    plan: Plan
    summary: str
    mistakes: list[tuple[str, Plan]]  # (kind, plan) candidates for the distractor


def initial_state(rng: random.Random) -> State:
    products = {
        f"P-{101 + i}": {"name": name, "price": price, "stock": rng.randint(0, 30)}
        for i, (name, price) in enumerate(rng.sample(PRODUCTS, 8))
    }
    customers = {}
    for i, name in enumerate(rng.sample(CUSTOMERS, 5)):
        first, last = name.lower().split(" ", 1)
        customers[f"C-{201 + i}"] = {"name": name, "email": f"{first}.{last}@example.com"}
    orders = {}
    for i in range(rng.randint(4, 7)):
        sku = rng.choice(sorted(products))
        quantity = rng.randint(1, 4)
        orders[f"O-{1001 + i}"] = {
            "customer_id": rng.choice(sorted(customers)),
            "items": [{"sku": sku, "quantity": quantity}],
            "total": round(products[sku]["price"] * quantity, 2),
            "status": rng.choice(("pending", "pending", "shipped")),
        }
    return {
        "products": products,
        "customers": customers,
        "orders": orders,
        "outbox": [],
        "next_order": 1001 + len(orders),
    }


def _call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(tool, arguments)


def _place_order(rng: random.Random, state: State) -> Draft | None:
    cid = rng.choice(sorted(state["customers"]))
    customer = state["customers"][cid]
    in_stock = [s for s, p in state["products"].items() if p["stock"] >= 2]
    if not in_stock:
        return None
    sku = rng.choice(sorted(in_stock))
    product = state["products"][sku]
    quantity = rng.randint(1, min(5, product["stock"]))
    order_id = f"O-{state['next_order']}"
    subject = f"Order {order_id} confirmed"
    lookup = [
        _call("find_customer", name=customer["name"]),
        _call("search_products", query=product["name"]),
    ]
    create = [_call("create_order", customer_id=cid, items=[{"sku": sku, "quantity": quantity}])]
    email = [
        _call(
            "send_email",
            to=customer["email"],
            subject=subject,
            body=f"Your order {order_id} for {quantity} x {product['name']} is confirmed.",
        )
    ]
    other = next(s for s in sorted(state["products"]) if s != sku)
    return Draft(
        goal=f"{customer['name']} wants to buy {quantity} x {product['name']}. Place the order, "
        f"then email them with the subject 'Order <order id> confirmed'.",
        plan=[lookup, create, email],
        summary=f"Placed order {order_id} for {customer['name']} and sent the confirmation.",
        mistakes=[
            ("stopped_early", [lookup, create]),
            (
                "wrong_argument",
                [
                    lookup,
                    [
                        _call(
                            "create_order",
                            customer_id=cid,
                            items=[{"sku": sku, "quantity": quantity + 1}],
                        )
                    ],
                    email,
                ],
            ),
            (
                "wrong_argument",
                [
                    lookup,
                    [_call("create_order", customer_id=cid, items=[{"sku": other, "quantity": 1}])],
                    email,
                ],
            ),
        ],
    )


def _cancel_order(rng: random.Random, state: State) -> Draft | None:
    pending = [o for o, order in state["orders"].items() if order["status"] == "pending"]
    if not pending:
        return None
    order_id = rng.choice(sorted(pending))
    customer = state["customers"][state["orders"][order_id]["customer_id"]]
    subject = f"Order {order_id} cancelled"
    lookup = [_call("get_order", order_id=order_id), _call("find_customer", name=customer["name"])]
    email = [
        _call(
            "send_email",
            to=customer["email"],
            subject=subject,
            body=f"As requested, order {order_id} has been cancelled.",
        )
    ]
    return Draft(
        goal=f"{customer['name']} asked us to cancel order {order_id}. Cancel it (its items go "
        f"back in stock) and email them with the subject '{subject}'.",
        plan=[lookup, [_call("cancel_order", order_id=order_id)], email],
        summary=f"Cancelled order {order_id} and told {customer['name']}.",
        mistakes=[
            ("wrong_tool", [lookup, [_call("ship_order", order_id=order_id)], email]),
            ("stopped_early", [lookup, [_call("cancel_order", order_id=order_id)]]),
            ("stopped_early", [lookup, email]),
        ],
    )


def _restock_low(rng: random.Random, state: State) -> Draft | None:
    threshold = rng.choice((5, 8, 10))
    target = rng.choice((20, 25, 30))
    low = sorted(s for s, p in state["products"].items() if p["stock"] < threshold)
    if len(low) < 2:
        return None
    refill = [_call("restock", sku=s, quantity=target - state["products"][s]["stock"]) for s in low]
    search = [_call("search_products", max_stock=threshold - 1)]
    overfill = [_call("restock", sku=s, quantity=target) for s in low]
    return Draft(
        goal=f"Restock every product that has fewer than {threshold} units in stock so that it "
        f"has exactly {target} units.",
        plan=[search, refill],
        summary=f"Restocked {', '.join(low)} to {target} units each.",
        mistakes=[
            ("stopped_early", [search, refill[:-1]]),
            ("wrong_argument", [search, overfill]),
        ],
    )


def _ship_pending(rng: random.Random, state: State) -> Draft | None:
    owners = sorted(
        {o["customer_id"] for o in state["orders"].values() if o["status"] == "pending"}
    )
    if not owners:
        return None
    cid = rng.choice(owners)
    customer = state["customers"][cid]
    pending = sorted(
        o
        for o, order in state["orders"].items()
        if order["customer_id"] == cid and order["status"] == "pending"
    )
    subject = "Your orders have shipped"
    find = [_call("find_customer", name=customer["name"])]
    listing = [_call("list_orders", customer_id=cid, status="pending")]
    ship = [_call("ship_order", order_id=o) for o in pending]
    email = [
        _call(
            "send_email",
            to=customer["email"],
            subject=subject,
            body=f"Shipped today: {', '.join(pending)}.",
        )
    ]
    mistakes = [
        ("stopped_early", [find, listing, ship]),
        (
            "wrong_tool",
            [find, listing, [_call("cancel_order", order_id=o) for o in pending], email],
        ),
    ]
    if len(pending) > 1:
        mistakes.append(("stopped_early", [find, listing, ship[:1], email]))
    return Draft(
        goal=f"Ship every pending order of {customer['name']}, then send them one email with the "
        f"subject '{subject}' listing the order ids.",
        plan=[find, listing, ship, email],
        summary=f"Shipped {', '.join(pending)} and emailed {customer['name']}.",
        mistakes=mistakes,
    )


FAMILIES: dict[str, Callable[[random.Random, State], Draft | None]] = {
    "place_order": _place_order,
    "cancel_order": _cancel_order,
    "restock_low": _restock_low,
    "ship_pending": _ship_pending,
}


def play(state: State, plan: Plan, *, strict: bool) -> State:
    """Run a plan on a copy of `state`; with strict, a refused call is an error in the plan."""
    state = copy.deepcopy(state)
    for turn in plan:
        for call in turn:
            try:
                HANDLERS[call.name](state, copy.deepcopy(call.arguments))
            except ToolError:
                if strict:
                    raise
    return state


def _canonical(state: State) -> str:
    return json.dumps(state, sort_keys=True)


def make_task(index: int) -> Task:
    rng = random.Random(f"{SEED}:{index}")
    family = sorted(FAMILIES)[index % len(FAMILIES)]
    for _ in range(50):
        state = initial_state(rng)
        draft = FAMILIES[family](rng, state)
        if draft is None:
            continue
        try:
            expected = play(state, draft.plan, strict=True)
        except ToolError:
            continue
        mistakes = [
            (k, p)
            for k, p in draft.mistakes
            if _canonical(play(state, p, strict=False)) != _canonical(expected)
        ]
        if mistakes:
            break
    else:
        raise RuntimeError(f"backoffice task {index}: no valid {family} task in 50 draws")
    mistake, wrong_plan = rng.choice(mistakes)
    turns = len(draft.plan)
    return Task(
        task_id=f"backoffice-{index:05d}",
        inputs={"company": COMPANY, "goal": draft.goal},
        data={
            "family": family,
            "initial_state": state,
            "expected_state": expected,
            "distractor_mistake": mistake,
        },
        reference=draft.summary,
        distractor=draft.summary,  # a wrong plan still claims success; the state tells the truth
        reference_actions=tuple(tuple(turn) for turn in draft.plan),
        distractor_actions=tuple(tuple(turn) for turn in wrong_plan),
        tags=(family, "multi-turn", "parallel-calls")
        if any(len(t) > 1 for t in draft.plan)
        else (family, "multi-turn"),
        difficulty="easy" if turns <= 2 else "medium" if turns == 3 else "hard",
    )
