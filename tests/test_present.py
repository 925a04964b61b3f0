"""The presentation layer: one way to write a figure, a string from data, and a table."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest

from gymflow.present import (
    coverage_text,
    format_counts,
    format_interval,
    format_number,
    format_percent,
    format_points,
    format_value,
    headline_text,
    markdown_text,
    safe_text,
)
from gymflow.present.terminal import TextConsole, print_table, styled, table


def test_figures():
    assert format_percent(0.5934) == "59.3%"
    assert format_percent(0.05, 2) == "5.00%"
    for missing in (None, math.nan, math.inf, "0.5", True):
        assert format_percent(missing) == "n/a"
    assert format_points(0.03) == "+3.0 pp" and format_points(-0.031) == "-3.1 pp"
    assert format_number(0.8731250918273645, 2) == "0.87"  # never 16 digits
    assert format_number(200) == "200" and format_number(None) == "n/a"
    assert format_interval((0.501, 0.679)) == "50.1% – 67.9%"
    assert format_interval(None, "one task") == "n/a: one task"
    assert format_interval([-0.02, 0.05], each=format_points, between=" to ") == (
        "-2.0 pp to +5.0 pp"
    )


def test_values_are_never_python_reprs():
    assert format_value({"expected": 200, "scored": 190}) == "expected 200, scored 190"
    assert format_counts({"wrong_answer": 42}) == "wrong_answer 42"
    assert format_counts({"pass_rate": "(0,1)"}, between="=") == "pass_rate=(0,1)"
    assert format_value(None) == "not set" and format_value(0.7) == "0.7"
    assert format_value(0.1 + 0.2) == "0.3" and format_value([1, 2]) == "1, 2"
    assert format_value({}) == "none" and format_value(False) == "false"


def test_headline_and_coverage_read_any_profile():
    profile = SimpleNamespace(pass_at_1=0.59, ci95=[0.501, 0.679], ci95_reason=None)
    assert headline_text(profile) == "pass@1 = 59.0% (95% CI 50.1% – 67.9%)"
    unscored = SimpleNamespace(pass_at_1=None, ci95=None, ci95_reason="no task scored")
    assert headline_text(unscored) == "pass@1 = n/a (95% CI n/a: no task scored)"
    coverage = SimpleNamespace(expected=200, scored=190, failed=10, missing=0)
    assert coverage_text(coverage) == "expected 200, scored 190, failed 10, missing 0"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # OSC window title
        ("\x1b[1A\x1b[2K", "\\x1b[1A\\x1b[2K"),  # cursor up, erase line
        ("a\rb\x08c\x7f", "a\\x0db\\x08c\\x7f"),
        ("\x9b31m", "\\x9b31m"),  # a C1 CSI
        ("abc\u202eexe.txt", "abc\\u202eexe.txt"),  # right-to-left override
        ("line 1\nline 2\tx", "line 1\nline 2\tx"),
        ("naïve 你好 [/]", "naïve 你好 [/]"),
    ],
)
def test_safe_text(raw: str, shown: str):
    assert safe_text(raw) == shown
    assert safe_text("a\nb\tc", newlines=False) == "a\\nb\\tc"


def test_markdown_text_cannot_make_a_link_or_break_a_table():
    shown = markdown_text("m[click](http://evil) | ![i](x) \x1b]0;t\x07\nnext")
    assert "[click](" not in shown and "![" not in shown and " | " not in shown
    assert shown == (
        "m\\[click\\]\\(http://evil\\) \\| \\!\\[i\\]\\(x\\) \\\\x1b\\]0;t\\\\x07\\\\nnext"
    )


def _console(width: int) -> tuple[TextConsole, io.StringIO]:
    out = io.StringIO()
    return TextConsole(file=out, width=width, force_terminal=False, color_system=None), out


def test_the_console_prints_markup_and_escapes_as_text():
    console, out = _console(80)
    console.print("model [/] [bold]x \x1b[2K")
    console.print(styled(("[red]", "bold"), " \x1b]0;t\x07"))
    grid = table("task")
    grid.add_row("t[/]\x1b[1A")
    console.print(grid)
    text = out.getvalue()
    assert "model [/] [bold]x \\x1b[2K" in text and "[red] \\x1b]0;t\\x07" in text
    assert "t[/]\\x1b[1A" in text and "\x1b" not in text


def test_a_long_line_is_not_hard_wrapped():
    console, out = _console(40)
    command = "GYMFLOW_BENCHMARKS_PATH=runs/a/data gym eval run --benchmark sel"
    console.print(f"  {command}")
    assert command in out.getvalue().splitlines()[0]


@pytest.mark.parametrize("width", [40, 80, 120])
def test_a_key_column_is_never_cut(width: int):
    """Check names at any width: whole on their line, never an ellipsis; within the width while
    the keys fit in it, wider only when they cannot."""
    names = ["missing_rollout", "task_unhealthy_every_repeat", "function_call_unpaired"]
    grid = table(
        "check", "kind", "status", "rollouts", "share", "allowed", "examples", keys=("check",)
    )
    for name in names:
        grid.add_row(name, "integrity", "ok", "0", "0.00%", "100.00%", "a1b2c3d4e5f6a7b8c9d0, x")
    console, out = _console(width)
    print_table(console, grid)
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue()
    for name in names:
        assert any(name in line.split() for line in lines), (name, out.getvalue())
    widest = max(len(line.rstrip()) for line in lines)
    assert widest <= width or width < len(names[1]) + 30, out.getvalue()


def test_headers_are_not_cut_mid_word():
    columns = ("variant", "isolates", "difference", "95% CI", "p (Holm)", "gained/lost", "health")
    grid = table(*columns, keys=("variant",))
    grid.add_row(
        "temperature-0.7", "temperature", "+3.0 pp", "-2.0 pp to +8.0 pp", "0.12", "4/1", "healthy"
    )
    console, out = _console(80)
    print_table(console, grid)
    words = out.getvalue().split()
    for header in ("variant", "isolates", "difference", "gained/lost", "health", "(Holm)"):
        assert header in words, out.getvalue()
    assert "temperature-0.7" in words and "…" not in out.getvalue()
