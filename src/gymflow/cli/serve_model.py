"""`gym serve model --port P`: the local policy server on its own, for any client to call.

It answers `/v1/responses` and `/v1/chat/completions` for the tasks of one environment or benchmark
(any other prompt gets a plain "do not know" answer), so the official `openai` SDK, another
harness or a load generator can talk to it exactly as to a real model server."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from gymflow.cli.app import fail, serve_app
from gymflow.core.config import FaultSpec, parse_config


def _faults(latency_ms: float, pairs: list[str]) -> FaultSpec:
    rates: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            fail(f"--fault {pair!r}: expected KIND=RATE, e.g. 429=0.05")
        try:
            rates[f"rate_{name.replace('-', '_')}"] = float(value)
        except ValueError:
            fail(f"--fault {pair!r}: rate {value!r} is not a number")
    try:
        return FaultSpec(latency_ms=latency_ms, **rates)
    except ValidationError as exc:
        known = ", ".join(f[len("rate_") :] for f in FaultSpec.model_fields if f != "latency_ms")
        problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
        fail(f"--fault: {problems} (kinds: {known})")


@serve_app.command("model")
def serve_model(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    environment: Annotated[str | None, typer.Option(help="Serve this environment's tasks.")] = None,
    benchmark: Annotated[str | None, typer.Option(help="Serve this benchmark's tasks.")] = None,
    seed: Annotated[int, typer.Option(help="Skill seed: which tasks it can and cannot do.")] = 0,
    latency_ms: Annotated[float, typer.Option(help="Added to every model answer.")] = 0.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault at a rate, KIND=RATE (429, 500, timeout, malformed, "
            "truncated, context_length, refused, reset); repeatable."
        ),
    ] = None,
) -> None:
    """Serve the seeded local policy (a simulation) over HTTP until interrupted."""
    from gymflow.models.open_files import ensure_serving_open_files
    from gymflow.rollouts.plan import resolve
    from gymflow.simulated.endpoint import policy_table
    from gymflow.simulated.policy_server import PolicyApp, serve

    faults = _faults(latency_ms, fault or [])
    target = {"benchmark": benchmark} if benchmark else {"environment": environment or "arithmetic"}
    plan = resolve(parse_config({**target, "model": {"skill_seed": seed}}, "gym serve model"))
    table = policy_table(plan)
    name = plan.benchmark.name if plan.benchmark else plan.env.name
    typer.echo(
        f"gymflow local policy server (a simulation): {len(table)} tasks of {name} "
        f"at http://{host}:{port}/v1"
    )
    ensure_serving_open_files()  # a socket per client connection, however many come
    serve(PolicyApp(table, seed=seed, faults=faults), host=host, port=port)
