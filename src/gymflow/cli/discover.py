"""`gym list environments|benchmarks` and `gym search`: find what to evaluate. Writes nothing."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from gymflow.cli.app import app, console, errors, fail, list_app, print_json
from gymflow.core.errors import GymflowError
from gymflow.environments.registry import (
    UnknownName,
    environment_sources,
    load_benchmark,
    load_environment,
)
from gymflow.environments.requirements import install_hint
from gymflow.environments.search import Catalog, load_catalog, search
from gymflow.present import format_interval, format_number, format_value
from gymflow.present.terminal import styled

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


#: Below this terminal width, the optional columns are left out (they are in --json and in
#: `gym list environments NAME`), so the description keeps room to be read.
WIDE = 120


def _print_table(columns: list[str], rows: list[list[str]], optional: set[str]) -> None:
    """Names never wrap; lists (tags, matched fields) and the description (last) wrap."""
    keep = [i for i, c in enumerate(columns) if console.width >= WIDE or c not in optional]
    table = Table()
    for i in keep[:-1]:
        table.add_column(columns[i], no_wrap=columns[i] not in ("tags", "matched", "splits"))
    table.add_column(columns[keep[-1]], ratio=1)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    console.print(table)


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def _catalog() -> Catalog:
    catalog = load_catalog()
    for problem in catalog.problems:
        errors.print(styled(("warning:", "yellow")), problem, highlight=False)
    return catalog


def _environment_summary(name: str) -> dict[str, Any]:
    source = environment_sources()[name]
    m = source.manifest
    return {
        "name": m.name,
        "domain": m.domain,
        "tags": m.tags,
        "harness": m.harness,
        "verifier": m.verifier.name,
        "tools": m.tools,
        "splits": {k: v.size for k, v in m.splits.items()},
        "default_split": m.default_split,
        "description": " ".join(m.description.split()),
        "path": str(source.folder),
    }


def _environment_detail(name: str, catalog: Catalog) -> dict[str, Any]:
    """One environment in full: manifest, tool schemas, benchmarks over it, split sizes."""
    sources = environment_sources()
    if name not in sources:
        raise UnknownName("environment", name, sources)
    try:
        env = load_environment(name)
        server = env.resources_server()
        tools = server.tools()
    except GymflowError as exc:
        fail(f"environment {name!r} does not load: {exc}", exc.exit_code)
    manifest = env.manifest.model_dump(mode="json")
    manifest["description"] = " ".join(env.manifest.description.split())
    return {
        **manifest,
        "path": str(env.folder),
        "verifier_version": server.verifier_version,
        "tool_schemas": tools,
        "benchmarks": [b.name for b in catalog.benchmarks if b.environment == name],
    }


def _print_detail(detail: dict[str, Any]) -> None:
    console.print(styled((detail["name"], "bold"), f"  ({detail['domain']})  {detail['path']}"))
    console.print(detail["description"], highlight=False)
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("tags", ", ".join(detail["tags"]))
    table.add_row("harness", detail["harness"])
    table.add_row(
        "verifier",
        f"{detail['verifier_version']}  params {format_value(detail['verifier']['params'])}",
    )
    reward = format_interval(detail["reward_range"], each=format_number, between=" to ")
    table.add_row("reward", f"{reward}; passes at >= {format_number(detail['pass_threshold'])}")
    table.add_row("reverify", "stateless" if detail["reverify_stateless"] else "needs state")
    splits = ", ".join(
        f"{name} ({spec['size'] if spec['size'] is not None else '?'})"
        for name, spec in detail["splits"].items()
    )
    table.add_row("splits", f"{splits}; default {detail['default_split']}")
    table.add_row("benchmarks", ", ".join(detail["benchmarks"]) or "none")
    console.print(table)
    if detail["tool_schemas"]:
        tools = Table("tool", "parameters", "description", title="tools")
        for tool in detail["tool_schemas"]:
            params = ", ".join((tool.get("parameters") or {}).get("properties", {}))
            tools.add_row(tool["name"], params, tool.get("description", ""))
        console.print(tools)
    console.print("prompt template", style="bold")
    console.print(detail["prompt_template"], highlight=False)


@list_app.command("environments")
def list_environments(
    name: Annotated[str | None, typer.Argument(help="Show one environment in full.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Every environment: name, domain, tags, harness, verifier, splits."""
    catalog = _catalog()
    if name is not None:
        detail = _environment_detail(name, catalog)
        print_json(detail) if as_json else _print_detail(detail)
        return
    rows = [_environment_summary(e.name) for e in catalog.environments]
    if as_json:
        print_json(rows)
        return
    _print_table(
        ["name", "domain", "tags", "harness", "verifier", "splits", "description"],
        [
            [
                row["name"],
                row["domain"],
                ", ".join(row["tags"]),
                row["harness"],
                row["verifier"],
                ", ".join(f"{k}:{v}" for k, v in row["splits"].items()),
                _first_sentence(row["description"]),
            ]
            for row in rows
        ],
        optional={"tags", "splits", "harness"},
    )


@list_app.command("benchmarks")
def list_benchmarks(as_json: JsonFlag = False) -> None:
    """Every benchmark: environment, split, repeats, sampling and version."""
    catalog = _catalog()
    sources = environment_sources()
    rows = []
    for entry in catalog.benchmarks:
        b = load_benchmark(entry.name)
        source = sources.get(b.environment)
        rows.append(
            {
                "name": b.name,
                "version": b.version(),
                "environment": b.environment,
                "split": b.split,
                "limit": b.limit,
                "repeats": b.repeats,
                "sampling": b.sampling.model_dump(),
                "verifier_params": b.verifier_params,
                "tags": b.tags,
                "description": entry.description,
                "path": str(entry.path),
                # what to install before it runs (its data package is absent), or None
                "needs": install_hint(source.manifest.requires) if source else None,
            }
        )
    if as_json:
        print_json(rows)
        return
    _print_table(
        ["name", "version", "environment", "split", "repeats", "temp", "description"],
        [
            [
                row["name"],
                row["version"],
                row["environment"],
                row["split"] or "(default)",
                str(row["repeats"]),
                str(row["sampling"]["temperature"]),
                (f"NEEDS `{row['needs']}`. " if row["needs"] else "")
                + _first_sentence(row["description"]),
            ]
            for row in rows
        ],
        optional={"version", "temp"},
    )


@app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="Words to look for, e.g. 'function calling'.")],
    as_json: JsonFlag = False,
    limit: Annotated[int, typer.Option(help="Show at most this many results.")] = 20,
) -> None:
    """Rank environments and benchmarks by name, tag, domain and description."""
    hits = search(query, _catalog())[:limit]
    if as_json:
        print_json([hit.as_json() for hit in hits])
        return
    if not hits:
        console.print(f"nothing matches {query!r}; try `gym list environments`", highlight=False)
        return
    _print_table(
        ["#", "kind", "name", "domain", "score", "matched", "description"],
        [
            [
                str(rank),
                hit.entry.kind,
                hit.entry.name,
                hit.entry.domain,
                f"{hit.score:.0f}",
                ", ".join(hit.matched),
                _first_sentence(hit.entry.description),
            ]
            for rank, hit in enumerate(hits, 1)
        ],
        optional={"score", "matched"},
    )
