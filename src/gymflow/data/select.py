"""Choosing tasks from a run by pass rate, outcome bucket, tag, difficulty and token length.

A task's pass rate is c / n over its scored rollouts under one verifier version (failed rollouts
are not scored, as in `gym eval profile`); its bucket is the one `gym eval diagnose` gives it."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from gymflow.analysis.diagnose import _bucket_sql
from gymflow.analysis.frames import frame
from gymflow.analysis.outcomes import check_verifier_version
from gymflow.core.errors import UserError
from gymflow.store.queries.selections import rollouts_of, task_table_sql

BUCKETS = ("always_pass", "sometimes_pass", "never_pass", "missing")
_BAND = re.compile(r"^\s*([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])])\s*$")


class SelectionError(UserError, ValueError):
    """A filter that cannot be applied; says which and why."""


@dataclass(frozen=True, slots=True)
class Band:
    """An interval of pass rates, written as in mathematics: `(0,1)` excludes both ends (the
    informative tasks), `[0,1]` includes them, `(0,0.5]` is above 0 up to and including 0.5."""

    low: float
    high: float
    low_inclusive: bool = False
    high_inclusive: bool = False

    def __str__(self) -> str:
        left, right = "[" if self.low_inclusive else "(", "]" if self.high_inclusive else ")"
        return f"{left}{self.low:g},{self.high:g}{right}"

    def sql(self, column: str) -> str:
        low_op, high_op = (
            (">=" if self.low_inclusive else ">"),
            ("<=" if self.high_inclusive else "<"),
        )
        return f"({column} {low_op} {self.low!r} AND {column} {high_op} {self.high!r})"


INFORMATIVE = Band(0.0, 1.0)


def parse_band(text: str) -> Band:
    """`(0,1)`, `[0,1]`, `(0.2,0.8]` ...; raises SelectionError on anything else."""
    match = _BAND.match(text)
    if match is None:
        raise SelectionError(
            f"--pass-rate {text!r}: write an interval such as (0,1) or [0,0.5] "
            "('(' excludes the end, '[' includes it)"
        )
    left, low_text, high_text, right = match.groups()
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        raise SelectionError(f"--pass-rate {text!r}: the ends must be numbers") from None
    if not (0.0 <= low <= high <= 1.0):
        raise SelectionError(f"--pass-rate {text!r}: need 0 <= low <= high <= 1")
    return Band(low, high, left == "[", right == "]")


@dataclass(frozen=True, slots=True)
class Filters:
    """What a task must satisfy to be kept; every filter given must hold.

    `pass_rate` None keeps any pass rate, including tasks with nothing scored (which have none);
    a band never keeps those. `tags` keeps a task carrying any of them. Token filters compare the
    mean over the task's stored rollouts (input tokens summed over a rollout's model calls)."""

    pass_rate: Band | None = INFORMATIVE
    buckets: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    difficulties: tuple[str, ...] = ()
    max_input_tokens: float | None = None
    max_output_tokens: float | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.buckets) - set(BUCKETS))
        if unknown:
            raise SelectionError(
                f"--bucket {', '.join(unknown)}: unknown (buckets: {', '.join(BUCKETS)})"
            )
        for flag, bound in (
            ("--max-input-tokens", self.max_input_tokens),
            ("--max-output-tokens", self.max_output_tokens),
        ):
            # NaN compares above every number in DuckDB: `<= nan` silently kept every task
            if bound is not None and not math.isfinite(bound):
                raise SelectionError(f"{flag} {bound}: expected a finite number")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_rate"] = None if self.pass_rate is None else str(self.pass_rate)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def predicates(self) -> dict[str, tuple[str, list[Any]]]:
        """{filter name: (SQL predicate over data_tasks, its parameters)} for the filters set."""
        out: dict[str, tuple[str, list[Any]]] = {}
        if self.pass_rate is not None:
            out["pass_rate"] = (self.pass_rate.sql("pass_rate"), [])
        if self.buckets:
            out["bucket"] = ("list_contains(?, bucket)", [list(self.buckets)])
        if self.tags:
            out["tags"] = ("list_has_any(coalesce(tags, []), ?)", [list(self.tags)])
        if self.difficulties:
            out["difficulty"] = ("list_contains(?, difficulty)", [list(self.difficulties)])
        if self.max_input_tokens is not None:
            out["max_input_tokens"] = ("mean_input_tokens <= ?", [self.max_input_tokens])
        if self.max_output_tokens is not None:
            out["max_output_tokens"] = ("mean_output_tokens <= ?", [self.max_output_tokens])
        return out


@dataclass(frozen=True, slots=True)
class Selection:
    verifier_version: str
    filters: Filters
    tasks: pl.DataFrame  # kept: task_id, tags, difficulty, n, c, pass_rate, bucket, ...
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return self.tasks["task_id"].to_list()


def prepare_tasks(con, verifier_version: str) -> None:
    """The temp table `data_tasks`: one row per task of the run with n, c, pass_rate (NULL when
    nothing is scored), bucket, and mean input and output tokens over its stored rollouts."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE data_tasks AS {task_table_sql(_bucket_sql())}",
        [verifier_version],
    )


def select_tasks(con, filters: Filters, *, verifier_version: str | None = None) -> Selection:
    """The tasks of the run in `con` that pass every filter, ordered by task_id; leaves them in
    the temp table `data_selected` (task_id) for the writers.

    `counts`: {"tasks": in the run, "kept", "kept_by_bucket": {bucket: n}, "rejected_by":
    {filter: tasks failing that filter, whatever the others say}, "rollouts": stored rollouts of
    the kept tasks}."""
    version = check_verifier_version(con, verifier_version)
    prepare_tasks(con, version)
    predicates = filters.predicates()
    where = " AND ".join(f"coalesce({sql}, FALSE)" for sql, _ in predicates.values()) or "TRUE"
    params = [p for _, ps in predicates.values() for p in ps]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE data_selected AS "
        f"SELECT * FROM data_tasks WHERE {where} ORDER BY task_id",
        params,
    )
    rejected = {
        name: con.execute(
            f"SELECT count(*) FROM data_tasks WHERE NOT coalesce({sql}, FALSE)", ps
        ).fetchone()[0]
        for name, (sql, ps) in predicates.items()
    }
    total, kept = con.execute(
        "SELECT (SELECT count(*) FROM data_tasks), (SELECT count(*) FROM data_selected)"
    ).fetchone()
    rollouts = rollouts_of(con, "data_selected")
    by_bucket = dict(
        con.execute("SELECT bucket, count(*) FROM data_selected GROUP BY bucket").fetchall()
    )
    tasks = frame(
        con,
        "SELECT task_id, tags, difficulty, n, c, pass_rate, bucket, mean_input_tokens, "
        "mean_output_tokens FROM data_selected ORDER BY task_id",
    )
    counts = {
        "tasks": total,
        "kept": kept,
        "kept_by_bucket": {b: by_bucket.get(b, 0) for b in BUCKETS},
        "rejected_by": rejected,
        "rollouts": rollouts,
    }
    return Selection(version, filters, tasks, counts)
