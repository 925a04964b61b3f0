"""The flags of `gym eval run` that each set one config key, derived from the config model: a
flag's type, choices and help are its field's, so a field that changes (a new `model.kind`, a
reworded description) changes its flag with it, where a mirror written by hand went stale.

`FLAGS` says which keys have a flag and under which name; `with_config_flags` adds them to a
command's signature (Typer reads parameters from it), and `overrides` reads them back as the
dotted keys `gymflow.core.config.merge_overrides` takes."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gymflow.core.config import EvalConfig

#: flag (its Python name; `--model-kind` on the command line) -> the config key it sets
FLAGS: dict[str, str] = {
    "benchmark": "benchmark",
    "environment": "environment",
    "repeats": "repeats",
    "limit": "limit",
    "out": "out",
    "concurrency": "concurrency",
    "seed": "sampling.seed",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "max_output_tokens": "sampling.max_output_tokens",
    "model_kind": "model.kind",
    "model_url": "model.base_url",
    "model_name": "model.name",
    "api_key_env": "model.api_key_env",
    "tool_choice": "model.tool_choice",
    "chat_template": "model.chat_template",
    "harness": "harness.name",
    "max_turns": "harness.max_turns",
    "prompt_template": "prompt_template",
    "stop_after_transport_failures": "stop_after_transport_failures",
}


def field_of(key: str) -> FieldInfo:
    """The config model's field at dotted `key`."""
    model: type[BaseModel] = EvalConfig
    *parents, name = key.split(".")
    for parent in parents:
        model = _model_in(model.model_fields[parent].annotation)
    return model.model_fields[name]


def _model_in(annotation: Any) -> type[BaseModel]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    raise TypeError(f"no config section in {annotation!r}")


def _scalar(annotation: Any) -> tuple[type, tuple[str, ...]]:
    """The command-line type of a field's annotation, and its choices where it has some: None
    dropped from a union, a Literal's values as choices, Annotated metadata ignored."""
    if get_origin(annotation) is Annotated:
        return _scalar(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(kept) != 1:
            raise TypeError(f"a flag takes one type, not {annotation!r}")
        return _scalar(kept[0])
    if get_origin(annotation) is Literal:
        return str, tuple(str(value) for value in get_args(annotation))
    if annotation in (int, float, str):
        return annotation, ()
    raise TypeError(f"no flag for a field of type {annotation!r}")


def _help(key: str, field: FieldInfo, choices: tuple[str, ...]) -> str:
    text = (field.description or "").rstrip(".")
    if choices and not all(choice in text for choice in choices):
        text = f"{' | '.join(choices)}. {text}"
    return f"{text} (sets {key})"


def _parameter(name: str, key: str) -> inspect.Parameter:
    field = field_of(key)
    kind, choices = _scalar(field.annotation)
    option = typer.Option(help=_help(key, field, choices))
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def with_config_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` (which takes the flags as `**flags`) with a parameter per `FLAGS` entry in its
    signature, after its own."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    flags = [_parameter(name, key) for name, key in FLAGS.items()]
    command.__signature__ = signature.replace(parameters=[*own, *flags])  # type: ignore[attr-defined]
    return command


def overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """The flags given, as dotted config keys (None: not given)."""
    return {FLAGS[name]: value for name, value in flags.items()}


def flag_for(key: str) -> str:
    """The flag that sets config `key` (`model.base_url` -> `--model-url`), for errors that
    name the field as the user gave it."""
    name = next((n for n, k in FLAGS.items() if k == key), key.rpartition(".")[2])
    return "--" + name.replace("_", "-")
