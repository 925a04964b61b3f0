"""The longest text gymflow writes, bound at the write as it is at the open.

Every open refuses a store holding a text value past `MAX_TEXT_BYTES` (`stored_values.
check_large_text`): gymflow never writes one. Each response read is bounded
(`max_response_bytes`), but what a rollout accumulates is not: a multi-turn rollout's
trajectory, or a late call's request holding the whole conversation, can pass 64 MiB, and the
store gymflow wrote would then be refused on its next read. So the writer measures each row of a
rollout before storing it, and a rollout holding a longer value is stored as the failure it is
(`failed`, `record_too_large`: a harness-side failure, left out of every score and never a
reward of 0), without its verdict and with each value past the bound left out (an empty answer
or trajectory, a call's field NULL), its error naming the table, field and size."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gymflow.core.config import MAX_TEXT_BYTES
from gymflow.core.records import Rollout
from gymflow.core.statuses import FAILED
from gymflow.store.schema import COLUMNS

#: The failure kind of a rollout holding a text value past `MAX_TEXT_BYTES`.
TOO_LARGE = "record_too_large"
#: Characters of the rollout's own error kept after the one that says why it failed.
_ERROR_KEPT = 4096


def text_bytes_over(value: Any) -> int | None:
    """The UTF-8 size of `value` when it is text past `MAX_TEXT_BYTES`, else None. Text of at
    most a quarter of the bound in characters is within it (a character is at most 4 bytes):
    encoded only past that."""
    if not isinstance(value, str) or len(value) <= MAX_TEXT_BYTES // 4:
        return None
    size = len(value.encode("utf-8", "surrogatepass"))
    return size if size > MAX_TEXT_BYTES else None


@dataclass(frozen=True)
class Oversized:
    """One text value past the bound: which table and column, of which row, and its size."""

    table: str
    column: str
    row: str
    size: int

    def __str__(self) -> str:
        return (
            f"{self.table}.{self.column} of {self.row}: {self.size:,} bytes of text, past the "
            f"{MAX_TEXT_BYTES:,} gymflow stores in one value"
        )


def oversized(
    table: str, rows: Sequence[tuple[Any, ...]], name: Callable[[tuple[Any, ...]], str]
) -> list[Oversized]:
    """Every text value of `rows` (of `table`, in its column order) past the bound; `name(row)`
    names a row in the message."""
    columns = COLUMNS[table]
    return [
        Oversized(table, columns[at], name(row), size)
        for row in rows
        for at, value in enumerate(row)
        if (size := text_bytes_over(value)) is not None
    ]


def without_oversized(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """`row` with each text value past the bound NULL (a model call's request or response)."""
    return tuple(None if text_bytes_over(value) is not None else value for value in row)


def as_too_large(rollout: Rollout, found: Sequence[Oversized]) -> Rollout:
    """`rollout` as the failure it is: `failed`, `record_too_large`, no verdict, its answer and
    trajectory left out when past the bound (its calls' values are `without_oversized`), its
    error saying which values passed it (then what it held before, shortened)."""
    said = "; ".join(map(str, found))
    kept = (rollout.error or "")[:_ERROR_KEPT]
    return replace(
        rollout,
        status=FAILED,
        failure_kind=TOO_LARGE,
        verification=None,
        output_text="" if text_bytes_over(rollout.output_text) is not None else rollout.output_text,
        trajectory=[] if any(f.column == "trajectory_json" for f in found) else rollout.trajectory,
        error=f"{said}; the rollout is recorded as failed, that text left out"
        + (f"\n\n{kept}" if kept else ""),
    )
