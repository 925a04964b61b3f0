"""MkDocs hook: the reference pages that code can state, generated from that code on every build:
one page per `gym` command, from the CLI itself, and the config file's keys, from its model.

Each build reads the command table (`gymflow.cli.COMMANDS`, `GROUPS`) and every command's own
help (click's `get_help_record`, the lines `gym CMD --help` prints), so a page cannot fall behind
its command and no generated file is committed. Several branches change commands at once; a
committed copy would conflict on every merge and need regenerating after it, while a page built
here is new on every build. A command in the table gets a page and a nav entry under
Reference > Commands; a removed one loses both. `mkdocs build --strict` (tests/test_docs.py)
fails on a broken link to one. The configuration file's page (`reference/config.md`) is built
the same way from `gymflow.core.config.EvalConfig`: every key, its type, default, bounds and
description; so is the list of health checks (`reference/health-checks.md`), from
`gymflow.analysis.health_checks.CHECKS`."""

from __future__ import annotations

import html
import importlib
import json
import re
import types
import typing
from typing import Any

from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

#: The guide page that explains each command group, linked from its commands' pages.
GUIDES: dict[str, tuple[str, str]] = {
    "eval run": ("basics/tutorial.md", "Tutorial"),
    "eval health": ("components/analysis.md", "Analysis"),
    "eval profile": ("components/analysis.md", "Analysis"),
    "eval diagnose": ("components/analysis.md", "Analysis"),
    "eval reverify": ("components/reverify.md", "Reverify"),
    "eval use-version": ("components/reverify.md", "Reverify"),
    "eval aggregate": ("components/sharding.md", "Sharding"),
    "demo": ("basics/tutorial.md", "Tutorial"),
    "report": ("components/reports.md", "Reports"),
    "server": ("components/prefect.md", "Prefect"),
    "search": ("components/environments.md", "Environments"),
    "list": ("components/environments.md", "Environments"),
    "env": ("components/environments.md", "Environments"),
    "serve model": ("components/models.md", "Models"),
    "serve environment": ("components/environments.md", "Environments"),
    "serve reports": ("components/prefect.md", "Prefect"),
    "data": ("components/training-data.md", "Training data"),
    "import": ("components/nemo-gym.md", "NeMo Gym"),
    "export": ("components/nemo-gym.md", "NeMo Gym"),
    "runs": ("components/history.md", "Run history"),
    "study": ("components/studies.md", "Studies"),
}

REFERENCE = "reference"


def page_name(words: tuple[str, ...]) -> str:
    """The page of a command: `reference/gym-eval-run.md` for `gym eval run`."""
    return f"{REFERENCE}/gym-{'-'.join(words)}.md"


def _escape(text: str) -> str:
    """Help text as Markdown table text: code spans kept, the rest escaped (a `<stem>` is not
    HTML, a `*` is not emphasis, a `|` does not end the cell), lines joined."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for part in parts:
        if part.startswith("`"):
            out.append(part)  # a table's cells split on no pipe inside a code span
        else:
            out.append(html.escape(part, quote=False).replace("|", r"\|").replace("*", r"\*"))
    return "".join(out)


def _contexts() -> dict[tuple[str, ...], Any]:
    """A click context for every command of the table (its module imported, as `gym` does):
    `ctx.command` is the command, and its command path is `gym WORDS`, as its help reads."""
    import typer.main

    from gymflow.cli import COMMANDS
    from gymflow.cli.app import app

    for module in sorted({module for module, _ in COMMANDS.values()}):
        importlib.import_module(f"gymflow.cli.{module}")
    root = typer.main.get_command(app)
    contexts = {}
    for words in COMMANDS:
        node, ctx = root, root.context_class(root, info_name="gym")
        for word in words:
            node = node.commands[word]
            ctx = node.context_class(node, info_name=word, parent=ctx)
        contexts[words] = ctx
    return contexts


def command_page(words: tuple[str, ...], summary: str, ctx: Any) -> str:
    """The Markdown page of one command: its summary, usage, help and every parameter."""
    command = ctx.command
    name = " ".join(("gym", *words))
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name == "option" and p.name != "help"]
    usage = [name, "[OPTIONS]"] if options else [name]
    for argument in arguments:
        shown = argument.name.upper() + ("..." if argument.nargs == -1 else "")
        usage.append(shown if argument.required else f"[{shown}]")
    # the command's own help (its docstring) says more than the table's one line, when it has one
    about = " ".join((command.help or summary).split())
    lines = [f"# {name}", "", _escape(about), "", "```text", " ".join(usage), "```", ""]
    for title, group in (("Arguments", arguments), ("Options", options)):
        if not group:
            continue
        lines += [f"## {title}", "", f"| {title[:-1].lower()} | what it does |", "|---|---|"]
        for param in group:
            record = param.get_help_record(ctx)
            shown, described = record if record else (param.name, "")
            lines.append(f"| `{shown.replace('|', '/')}` | {_escape(described)} |")
        lines.append("")
    guide = GUIDES.get(" ".join(words)) or GUIDES.get(words[0])
    if guide:
        lines += [f"Guide: [{guide[1]}](../{guide[0]})", ""]
    lines += ["*Generated from `" + name + " --help` when the docs are built.*", ""]
    return "\n".join(lines)


def index_page() -> str:
    """The reference's first page: every command by group, with the line `gym --help` shows."""
    from gymflow.cli import COMMANDS, GROUPS

    lines = [
        "# Commands",
        "",
        "Every `gym` command, with the line `gym --help` shows for it. Each page is generated "
        "from the command's own `--help` when these docs are built. `gymflow` is the same "
        "command under a second name.",
        "",
    ]
    top = [words for words in COMMANDS if len(words) == 1]
    sections = [("Top-level commands", top)] + [
        (f"gym {group}: {about}", [w for w in COMMANDS if len(w) == 2 and w[0] == group])
        for group, about in GROUPS.items()
    ]
    for title, commands in sections:
        lines += [f"## {title}", "", "| command | what it does |", "|---|---|"]
        for words in commands:
            link = page_name(words).removeprefix(f"{REFERENCE}/")
            lines.append(f"| [`gym {' '.join(words)}`]({link}) | {_escape(COMMANDS[words][1])} |")
        lines.append("")
    return "\n".join(lines)


def _type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: `int | None`, `auto | required | none`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(str(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is not None:
        inner = ", ".join(_type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: Any) -> str:
    """A field's numeric bounds (pydantic's `ge`, `gt`, `le`, `lt`) as one phrase."""
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    found = []
    for item in field.metadata:
        for name, sign in signs.items():
            if getattr(item, name, None) is not None:
                found.append(f"{sign} {getattr(item, name)}")
    return ", ".join(found)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type holds (`ModelConfig`, `Sampling | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


HEADER = "| key | type | default | bounds | about |"


def _config_rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows, nested = [], []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        inner = _models(field.annotation)
        if inner:
            nested += [(key, m) for m in inner]
            link = f"[{inner[0].__name__}](#{key.replace('.', '')})"
            rows.append(f"| `{key}` | {link} | | | {_escape(field.description or '')} |")
            continue
        default = field.get_default(call_default_factory=True)
        shown = "" if default is PydanticUndefined else f"`{json.dumps(default, default=str)}`"
        kind, about = _escape(_type_name(field.annotation)), _escape(field.description or "")
        rows.append(f"| `{key}` | {kind} | {shown} | {_escape(_bounds(field))} | {about} |")
    sections = []
    for key, inner in nested:
        doc = " ".join((inner.__doc__ or "").split())
        sections += ["", f"## {key} {{#{key.replace('.', '')}}}", ""]
        if doc:
            sections += [_escape(doc), ""]
        sections += [HEADER, "|---|---|---|---|---|"]
        sections += _config_rows(inner, f"{key}.")
    return rows + sections


def config_page() -> str:
    """Every key of an eval config file, from `gymflow.core.config.EvalConfig` itself."""
    from gymflow.core.config import EvalConfig

    return "\n".join(
        [
            "# Configuration file",
            "",
            "Every key an eval config file (`gym eval run CONFIG`) may set, with its type, "
            "default and bounds. Unknown keys are errors. This page is generated from "
            "`gymflow.core.config.EvalConfig` when the docs are built; see [Options]"
            "(../basics/options.md) for how flags and files combine.",
            "",
            HEADER,
            "|---|---|---|---|---|",
            *_config_rows(EvalConfig, ""),
            "",
        ]
    )


def health_page() -> str:
    """Every health check, from `gymflow.analysis.health_checks.CHECKS`: what it flags and when it
    fails the gate."""
    from gymflow.analysis.health_checks import CHECKS, TASK_CHECK, TASK_CHECK_DESCRIPTION, Check

    def gate(check: Any) -> str:
        """When it fails the gate by default (`health.Gate.threshold`): its own share, else
        `--max-share` (0: any) for integrity, `--warning-max-share` (1: never) for warnings."""
        if check.threshold is not None:
            return f"more than {check.threshold:.0%}"
        return "never, unless allowed less" if check.severity == "warning" else "any"

    lines = [
        "# Health checks",
        "",
        "Every check `gym eval health` runs, as `gymflow.analysis.health_checks` defines it (this "
        "page is generated from it when the docs are built). An *integrity* check fails the gate "
        "when it flags more than its allowed share of the expected rollouts; a *warning* describes "
        "the policy or the setup. `--max-share` sets the integrity checks' allowance (0: any "
        "flagged fails), `--warning-max-share` the warnings' (1: never), and "
        "`--threshold NAME=SHARE` one check's. See [Analysis](../components/analysis.md#health).",
        "",
        "| check | kind | fails the gate by default when it flags | what it flags |",
        "|---|---|---|---|",
    ]
    # the task check is derived from the rollout checks, after them (`health.health`)
    derived = Check(TASK_CHECK_DESCRIPTION, "", "task", severity="warning")
    for name, check in [*CHECKS.items(), (TASK_CHECK, derived)]:
        lines.append(
            f"| `{name}` | {check.severity} | {gate(check)} | {_escape(check.description)} |"
        )
    return "\n".join([*lines, ""])


def on_config(config: Any) -> Any:
    """Put a page per command under Reference > Commands in the nav."""
    from gymflow.cli import COMMANDS

    entries = [{"gym " + " ".join(words): page_name(words)} for words in COMMANDS]
    for section in config["nav"]:
        if isinstance(section, dict) and "Reference" in section:
            section["Reference"].insert(0, {"Commands": [f"{REFERENCE}/index.md", *entries]})
            return config
    raise ValueError("mkdocs.yml's nav has no Reference section for the command pages")


def on_files(files: Files, config: Any) -> Files:
    """Generate the command pages and the reference index."""
    from gymflow.cli import COMMANDS

    files.append(File.generated(config, f"{REFERENCE}/index.md", content=index_page()))
    files.append(File.generated(config, f"{REFERENCE}/config.md", content=config_page()))
    files.append(File.generated(config, f"{REFERENCE}/health-checks.md", content=health_page()))
    for words, ctx in _contexts().items():
        page = command_page(words, COMMANDS[words][1], ctx)
        files.append(File.generated(config, page_name(words), content=page))
    return files
