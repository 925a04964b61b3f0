"""The terminal's side of the presentation layer: a Rich console that prints every string as text,
and tables that never cut what a user must type.

- Markup is off: a task id, tag or model name holding `[/]` is printed as it is, not parsed (it
  made five commands exit with a MarkupError). Style comes from `styled` parts instead.
- Control characters in any printed string are shown escaped (`gymflow.present.safe_text`): an
  id holding an OSC title, cursor-up or erase-line sequence cannot rewrite what is on screen.
- Lines are never hard-wrapped (soft wrap): a command printed for copy and paste stays one line
  whatever the width; the terminal folds it for the eye only.
- A table's key columns (check names, run paths: what a user types back) are never wrapped or
  shortened; when the columns cannot share the width, each row is printed as a record instead.
  Other cells wrap between words (fold, as a last resort); none is ever replaced by "…"."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from gymflow.present import safe_text


class TextConsole(Console):
    """A Console that prints strings as text: no markup, no emoji codes, control characters
    escaped, and no hard wrapping of lines."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, soft_wrap=True, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Every str this console prints, a table cell's included, passes here.
        kwargs.update(markup=False, emoji=False)
        return super().render_str(safe_text(text), **kwargs)


#: What `styled` shows for a value the store holds as NULL (an import names no benchmark).
MISSING = "—"


def _shown(value: object) -> str:
    return MISSING if value is None else str(value)


def styled(*parts: str | tuple[str | None, str] | None) -> Text:
    """One line from plain parts and (text, style) parts, every part printed as text:
    `styled("pass@1 = ", (figure, "bold"))`. Newlines are shown escaped too: a task id or
    model name holding one printed a forged line of its own ("verdict: healthy"). A message
    of several lines goes beside it instead: `console.print(styled(("error:", "red")), text)`.
    A part that is None (a NULL the store holds: an import's benchmark) shows as `MISSING`."""
    return Text.assemble(
        *(
            (safe_text(_shown(part[0]), newlines=False), part[1])
            if isinstance(part, tuple)
            else safe_text(_shown(part), newlines=False)
            for part in parts
        )
    )


def table(*headers: str, keys: tuple[str, ...] = ()) -> Table:
    """A table whose `keys` columns are never wrapped nor shortened (print it with
    `print_table`); every other cell folds rather than being cut with "…"."""
    return Table(
        *(
            Column(header, no_wrap=header in keys, overflow="fold")
            if header in keys
            else Column(header, overflow="fold")
            for header in headers
        )
    )


#: A column that is not a key is narrowed no further than its header's longest word and this
#: many cells of its longest word: below it, a narrow terminal folds words into fragments.
_WORD_FLOOR = 8


def _text(cell: Any) -> str:
    return safe_text(cell.plain if isinstance(cell, Text) else str(cell))


def _longest_word(texts: list[str]) -> int:
    return max((cell_len(word) for text in texts for word in text.split()), default=0)


def _overhead(grid: Table) -> int:
    """Cells a row takes beyond its content: padding and column rules."""
    columns = len(grid.columns)
    _, right, _, left = grid.padding
    padding = columns * (left + right) - (0 if grid.pad_edge else left + right)
    rules = (columns - 1 + (2 if grid.show_edge else 0)) if grid.box else 0
    return padding + rules


def column_widths(grid: Table, width: int) -> list[int]:
    """Content widths for `grid`'s columns within `width` cells where possible: every column as
    wide as its widest cell, then the widest columns that are not keys narrowed one cell at a
    time, first down to their longest word (lines break between words), then, if still too
    wide, down to their floor (a key column's floor is its widest cell)."""
    natural, whole_words, floor = [], [], []
    for column in grid.columns:
        header, cells = _text(column.header), [_text(c) for c in column.cells]
        lines = [line for text in (header, *cells) for line in text.splitlines()]
        widest = max((cell_len(line) for line in lines), default=0)
        natural.append(widest)
        if column.no_wrap:
            whole_words.append(widest)
            floor.append(widest)
        else:
            whole_words.append(max(_longest_word([header, *cells]), 1))
            floor.append(max(_longest_word([header]), min(_longest_word(cells), _WORD_FLOOR), 1))
    widths = list(natural)
    excess = sum(widths) + _overhead(grid) - width
    for limit in (whole_words, floor):
        while excess > 0:
            shrinkable = [i for i, w in enumerate(widths) if w > limit[i]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return widths


def _fit(grid: Table, width: int) -> int:
    """Fix `grid`'s column widths for `width`; the width the table then takes."""
    widths = column_widths(grid, width)
    for column, content in zip(grid.columns, widths, strict=True):
        column.width = content
    return sum(widths) + _overhead(grid)


def print_table(console: Console, grid: Table) -> None:
    """Print `grid` within the console's width: bordered if it fits, else without borders and
    padding (columns one space apart), else as one record per row (`print_records`), since a
    key cell is never cut."""
    if _fit(grid, console.width) > console.width:
        grid.box, grid.show_edge, grid.pad_edge = box.SIMPLE_HEAD, False, False
        grid.padding = (0, 0)
        if _fit(grid, console.width) > console.width:
            print_records(console, grid)
            return
    console.print(grid)


def print_records(console: Console, grid: Table) -> None:
    """`grid` with one record per row, for a width its columns cannot share: the key cells on a
    line of their own, whole (a terminal folds an over-long line for the eye only), then every
    other cell as "header value", wrapped between cells and words."""
    columns = grid.columns
    for index in range(grid.row_count):
        cells = [(c, _text(c.header), list(c.cells)[index]) for c in columns]
        keys = [_text(cell) for c, _, cell in cells if c.no_wrap]
        if keys:
            console.print("  ".join(keys), style="bold")
        details = Text()
        for number, (_, header, cell) in enumerate(c for c in cells if not c[0].no_wrap):
            details.append("; " if number else "")
            details.append(f"{header} ", style="dim")
            details.append(cell if isinstance(cell, Text) else Text(_text(cell)))
        console.print(Padding(details, (0, 0, 0, 2)), soft_wrap=False)
