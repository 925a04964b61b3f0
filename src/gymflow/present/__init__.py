"""How gymflow shows a figure or a stored string to a person: the one place percentages, intervals,
numbers, counts and the headline are formatted, for the CLI, the Prefect artifacts, the run log
and the HTML report alike, so that one figure reads the same wherever it appears.

Plain functions of plain values (no Rich, no Jinja): the terminal's side is
`gymflow.present.terminal`. The headline functions read any object with the fields of
`gymflow.analysis.results.Profile` they name (a Protocol, not an import: this sits below
analysis, which uses the formatters in its own sentences).

Cut-off: plain values in, strings out; imports nothing of gymflow's. Tier 0, beside `core`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

NOT_AVAILABLE = "n/a"

__tier__ = 0

__all__ = [
    "NOT_AVAILABLE",
    "coverage_text",
    "format_counts",
    "format_interval",
    "format_number",
    "format_percent",
    "format_points",
    "format_value",
    "headline_text",
    "markdown_text",
    "safe_text",
    "terminal",
]


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def format_percent(value: Any, digits: int = 1) -> str:
    """A share (0.593) as a percentage ("59.3%"); None, NaN and non-numbers as "n/a"."""
    return f"{100 * value:.{digits}f}%" if _finite(value) else NOT_AVAILABLE


def format_points(value: Any, digits: int = 1) -> str:
    """A difference of two shares in signed percentage points ("+3.0 pp")."""
    return f"{100 * value:+.{digits}f} pp" if _finite(value) else NOT_AVAILABLE


def format_number(value: Any, digits: int = 3) -> str:
    """An integer as it is; any other number to `digits` significant digits (a correlation is
    0.873, never 0.8731250918273645); None and non-finite numbers as "n/a"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.{digits}g}" if _finite(value) else NOT_AVAILABLE


def format_interval(
    bounds: Sequence[Any] | None,
    reason: str | None = None,
    *,
    each: Callable[[Any], str] = format_percent,
    between: str = " – ",
) -> str:
    """An interval ("50.1% – 67.9%"), or "n/a" with the reason there is none."""
    if not bounds:
        return f"{NOT_AVAILABLE}: {reason}" if reason else NOT_AVAILABLE
    low, high = bounds
    return f"{each(low)}{between}{each(high)}"


def format_value(value: Any) -> str:
    """A setting or stored value as a person reads it, never as a Python repr: None is "not
    set", a float has at most 4 significant digits, a mapping is "key value, …", a list is
    "a, b"."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_number(value, 4)
    if isinstance(value, Mapping):
        return format_counts(value) if value else "none"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(format_value(v) for v in value) if value else "none"
    return str(value)


def format_counts(counts: Mapping[str, Any], *, between: str = " ") -> str:
    """`{'wrong_answer': 42, 'format': 3}` as "wrong_answer 42, format 3" (in the given order)."""
    return ", ".join(f"{name}{between}{format_value(count)}" for name, count in counts.items())


class CoverageFigures(Protocol):
    expected: int
    scored: int
    failed: int
    missing: int


class HeadlineFigures(Protocol):
    pass_at_1: float | None
    ci95: Sequence[float] | None
    ci95_reason: str | None


def coverage_text(coverage: CoverageFigures) -> str:
    """Coverage beside every score: "expected 200, scored 190, failed 10, missing 0"."""
    return (
        f"expected {coverage.expected}, scored {coverage.scored}, failed {coverage.failed}, "
        f"missing {coverage.missing}"
    )


def headline_text(profile: HeadlineFigures) -> str:
    """The headline figure with its interval: "pass@1 = 59.0% (95% CI 50.1% – 67.9%)"."""
    return (
        f"pass@1 = {format_percent(profile.pass_at_1)} "
        f"(95% CI {format_interval(profile.ci95, profile.ci95_reason)})"
    )


# C0 controls but newline and tab, DEL, C1 controls, and the bidirectional overrides and
# isolates, which reorder what a terminal or a browser shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: str, *, newlines: bool = True) -> str:
    """`text` with every control character shown as an escape (ESC as `\\x1b`): a string from
    data or a server can then neither move the cursor, retitle the window, erase a line nor
    reorder what is shown. With `newlines=False` newlines and tabs are escaped too, for one
    field that must stay on its line."""
    text = _CONTROL.sub(_escape, text)
    if not newlines:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")


def markdown_text(text: str) -> str:
    """`text` for a markdown document (a Prefect artifact) shown as it is: control characters
    escaped and every markdown character backslash-escaped, so a model name cannot become a
    link, an image or a table cell break."""
    return _MARKDOWN.sub(r"\\\1", safe_text(text, newlines=False))
