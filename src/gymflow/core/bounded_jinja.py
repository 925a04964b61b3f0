"""A Jinja sandbox with bounds on time and memory, for templates a benchmark's author wrote.

Jinja's own sandbox stops attribute escapes, not work: `{{ 'x'|center(10**9) }}` allocates a
gigabyte and two nested `range(100000)` loops run for hours. Here one render gets a budget of
steps (loop iterations and calls) and of output characters, and every operation that can make a
large value from small ones (`*`, `**`, padding widths, `join`, `replace`, `~`, a `{% set %}`
block) is checked before or right after it runs. A filter that runs Python for every item of
its input (`sort`, `map`, `groupby`, and any filter over a list) costs a step per item: one
`a|list|sort` of 4 million characters took 8 s as one step, `groupby` 21 s. And one render gets a
wall-clock bound, checked at every step, for whatever work remains uncounted. A template over a
bound raises SecurityError (a TemplateError), which the caller reports with the template's file
and field; over the time bound, RenderTimeout, so a caller can stop rendering other rows."""

# pyright: reportUnknownArgumentType=false, reportUnknownVariableType=false
# (the values a template makes are of any type: a list or dict it builds has items of no known
# type, and the bounds below count them without needing one)

from __future__ import annotations

import functools
import inspect
import operator
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

#: Longest text or list a template may make, and the most it may output, in characters (a
#: prompt over a million tokens fits no model's context).
MAX_SIZE = 1 << 22
#: Loop iterations plus calls in one render (a macro call costs ~10 us: about a second).
MAX_STEPS = 100_000
#: Wall-clock seconds one render may take: a prompt renders in well under a millisecond.
MAX_SECONDS = 2.0
#: Filters that cost the same whatever their input's size: the one exception to a step per item.
CONSTANT_FILTERS = {"length", "count", "first", "last", "random", "default", "d"}
#: Filters that run Python per character of a text (for the others a text costs no steps: they
#: run at C speed, and the slow ones are SLOW_FILTERS).
PER_ITEM_TEXT_FILTERS = {
    *("sort", "unique", "map", "select", "reject", "selectattr", "rejectattr", "groupby"),
    *("min", "max", "sum", "batch", "slice", "dictsort", "list", "join"),
}
#: Largest integer a template may compute, in bits.
MAX_BITS = 1 << 16
#: Methods and filters whose result grows with an integer argument (a width or a count).
SIZED_BY_ARGUMENT = {"center", "ljust", "rjust", "zfill", "expandtabs", "indent", "batch", "slice"}
#: Filters whose time grows faster than their input (pure Python, quadratic in places: 400 KB
#: through `striptags` took 2.5 s), and the longest text they take.
SLOW_FILTERS, MAX_SLOW_INPUT = {"striptags", "urlize", "wordwrap"}, 1 << 16
_NUMBER = re.compile(r"\d+")
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_STEPS_FILTER, _OUTPUT_FILTER, _SIZE_FILTER = "_gymflow_steps", "_gymflow_output", "_gymflow_size"


class RenderTimeout(SecurityError):
    """The render outlived MAX_SECONDS: the template's own cost, whatever row it renders."""


@dataclass(slots=True)
class _Budget:
    deadline: float
    steps: int = MAX_STEPS
    output: int = MAX_SIZE


_BUDGET: ContextVar[_Budget] = ContextVar("jinja_budget")


def _step(count: int = 1) -> None:
    budget = _BUDGET.get()
    budget.steps -= count
    if budget.steps < 0:
        raise SecurityError(f"more than {MAX_STEPS} loop iterations, calls and filtered items")
    if time.monotonic() > budget.deadline:
        raise RenderTimeout(f"took more than {MAX_SECONDS:g} s to render")


def _charge(name: str, value: Any) -> Any:
    """A filter's cost in steps before it runs: a step per item of its input (an iterator's
    items as they are drawn), none for a text a C-speed filter reads."""
    if name in CONSTANT_FILTERS:
        return value
    if isinstance(value, str):
        if name in PER_ITEM_TEXT_FILTERS:
            _step(len(value))
    elif isinstance(value, list | tuple | dict | set | frozenset | range):
        _step(len(value))
    elif isinstance(value, Iterator):
        return _steps(value)
    return value


def _sized(value: Any) -> Any:
    if isinstance(value, str | bytes | list | tuple | dict | set) and len(value) > MAX_SIZE:
        raise SecurityError(f"makes a value of {len(value)} items (at most {MAX_SIZE})")
    if isinstance(value, int):
        _bits(value.bit_length())
    return value


def _bits(bits: int) -> None:
    if bits > MAX_BITS:
        raise SecurityError(f"makes an integer over {MAX_BITS} bits")


def _at_most(size: int) -> None:
    if size > MAX_SIZE:
        raise SecurityError(f"would make a value of {size} items (at most {MAX_SIZE})")


def _no_large_ints(args: Iterable[Any]) -> None:
    for arg in args:
        if isinstance(arg, int) and abs(arg) > MAX_SIZE:
            raise SecurityError(f"a width or count of {arg} (at most {MAX_SIZE})")


def _check_printf(text: str) -> None:
    """`%` formatting's widths and precisions: none taken from an argument, none over the bound."""
    for match in _PRINTF.finditer(text):
        if "*" in match.groups():
            raise SecurityError("a format width taken from an argument (%*s)")
        _no_large_ints(int(number) for number in match.groups() if number)


def _check_braces(text: str) -> None:
    """`str.format`'s widths, as `_check_printf`; a string that does not parse fails by itself."""
    try:
        specs = [spec for _, _, spec, _ in string.Formatter().parse(text) if spec]
    except ValueError:
        return
    for spec in specs:
        if "{" in spec:
            raise SecurityError("a format width taken from an argument ({:{}})")
        _no_large_ints(int(number) for number in _NUMBER.findall(spec))


def _precheck(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse, before it runs, a call of `name` on `value` whose result would be too large."""
    if name in SLOW_FILTERS and isinstance(value, str) and len(value) > MAX_SLOW_INPUT:
        raise SecurityError(f"{name} of {len(value)} characters (at most {MAX_SLOW_INPUT})")
    if name in SIZED_BY_ARGUMENT:
        _no_large_ints([*args, *kwargs.values()])
        width = kwargs.get("width", args[0] if args else None)
        if name == "indent" and isinstance(width, str) and isinstance(value, str):
            _at_most((value.count("\n") + 1) * len(width))
    elif name == "format" and isinstance(value, str):
        _check_printf(value)  # the `format` filter is `%`; str.format is checked by `call`
    elif name == "join":  # `sep.join(items)` or `items|join(sep)`
        items, sep = (args[0], value) if isinstance(value, str) and args else (value, None)
        if sep is None:
            sep = args[0] if args else kwargs.get("d", "")
        if isinstance(items, list | tuple):
            _at_most(sum(len(str(item)) for item in items) + len(str(sep)) * len(items))
    elif name == "replace" and isinstance(value, str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        count = value.count(old) if old else len(value) + 1
        _at_most(len(value) + count * max(len(new) - len(old), 0))


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    skip = 2 if hasattr(function, "jinja_pass_arg") else 1  # the context, then the value

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _step()
        if len(args) >= skip:
            args = (*args[: skip - 1], _charge(name, args[skip - 1]), *args[skip:])
        _precheck(name, args[skip - 1] if len(args) >= skip else None, args[skip:], kwargs)
        return _sized(function(*args, **kwargs))

    return wrapper


class _Namespace(Namespace):
    """`namespace()`, whose attributes cannot grow past the bound across loop iterations."""

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, _sized(value))


def _steps(iterable: Iterable[Any]) -> Iterator[Any]:
    for item in iterable:
        _step()
        yield item


def _output(value: Any) -> str:
    text = str(value)
    _step(0)  # the clock
    budget = _BUDGET.get()
    budget.output -= len(text)
    if budget.output < 0:
        raise SecurityError(f"outputs more than {MAX_SIZE} characters")
    return text


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "*": operator.mul,
    "**": cast(Callable[[Any, Any], Any], operator.pow),
    "%": operator.mod,
}


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Immutable (a template cannot grow a list in place) and bounded, as the module says."""

    intercepted_binops = frozenset(_BINARY)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters.update({_STEPS_FILTER: _steps, _OUTPUT_FILTER: _output, _SIZE_FILTER: _sized})
        template_globals: dict[str, Any] = self.globals  # pyright: ignore[reportUnknownMemberType]
        del template_globals["lipsum"]  # lipsum(n) writes n paragraphs
        template_globals["namespace"] = _Namespace

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Budgeted().visit(super()._parse(source, name, filename))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for count, other in ((left, right), (right, left)):
                if isinstance(count, int) and isinstance(other, str | list | tuple):
                    _at_most(len(other) * max(count, 0))
            if isinstance(left, int) and isinstance(right, int):
                _bits(left.bit_length() + right.bit_length())
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            _bits(left.bit_length() * right)
        elif operator == "%" and isinstance(left, str):
            _check_printf(left)
        return _sized(_BINARY[operator](left, right))

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        _step()
        method = inspect.unwrap(obj)  # str.format comes wrapped by the sandbox
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if name in ("format", "format_map") and isinstance(owner, str):
            _check_braces(owner)
            _no_large_ints([*args, *kwargs.values()])
        else:
            _precheck(name, owner, args, kwargs)
        for arg in (*args, *kwargs.values()):
            _sized(arg)
        return _sized(super().call(context, obj, *args, **kwargs))


class _Budgeted(NodeTransformer):
    """Every loop, output, concatenation and `{% set %}` block through the budget's filters."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)  # transforms the children in place, and returns `node`
        node.iter = _filter(node.iter, _STEPS_FILTER)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)  # transforms the children in place, and returns `node`
        node.nodes = [
            _filter(nodes.Const(n.data) if isinstance(n, nodes.TemplateData) else n, _OUTPUT_FILTER)
            for n in node.nodes
        ]
        return node

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        self.generic_visit(node)  # transforms the children in place, and returns `node`
        node.filter = _filter(node.filter, _SIZE_FILTER)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        return _filter(self.generic_visit(node), _SIZE_FILTER)


def _filter(node: nodes.Node | None, name: str) -> nodes.Filter:
    lineno = node.lineno if node is not None else 1
    return nodes.Filter(node, name, [], [], None, None, lineno=lineno)


def render(template: Any, inputs: dict[str, Any]) -> str:
    """Render a template compiled by a BoundedSandbox, within a fresh budget."""
    token = _BUDGET.set(_Budget(time.monotonic() + MAX_SECONDS))
    try:
        return "".join(template.generate(**inputs))
    finally:
        _BUDGET.reset(token)
