"""The DuckDB schema of a run store: one file per run or shard, one writer process at a time.

Each table is declared once, as a `Table` (its columns in order, with their types and keys);
the DDL, the column order the writers insert in and the row builders (`store/rows.py`) all
derive from it, so adding a column is one edit here (and, for stores that already exist, one
`Column(..., added=True)`, which `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` gives old stores)."""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    #: Added after the table first shipped: stores created before lack it until opened to write.
    added: bool = False

    @property
    def ddl(self) -> str:
        return f"{self.name} {self.type}"


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def ddl(self) -> str:
        return self.create()

    def create(self, *, temporary: bool = False) -> str:
        parts = [column.ddl for column in self.columns]
        if len(self.key) == 1:  # a one-column key is declared on its column, as it always was
            at = self.column_names.index(self.key[0])
            parts[at] += " PRIMARY KEY"
        elif self.key:
            parts.append(f"PRIMARY KEY ({', '.join(self.key)})")
        kind = "TEMP TABLE" if temporary else "TABLE"
        return f"CREATE {kind} IF NOT EXISTS {self.name} ({', '.join(parts)})"

    def added_columns(self) -> tuple[str, ...]:
        return tuple(
            f"ALTER TABLE {self.name} ADD COLUMN IF NOT EXISTS {column.ddl}"
            for column in self.columns
            if column.added
        )


def _table(name: str, columns: str, key: tuple[str, ...] = (), added: tuple[str, ...] = ()):
    """A `Table` from `"name TYPE, ..."` text: the schema reads as the DDL it makes."""
    parsed = []
    for part in columns.split(","):
        column, kind = part.split(maxsplit=1)
        parsed.append(Column(column, kind.strip(), added=column in added))
    return Table(name, tuple(parsed), key)


SPECS: tuple[Table, ...] = (
    _table("meta", "key VARCHAR, value VARCHAR", key=("key",)),
    _table(
        "runs",
        """run_id VARCHAR, created_at TIMESTAMP, gymflow_version VARCHAR, config_json VARCHAR,
        config_hash VARCHAR, benchmark VARCHAR, benchmark_version VARCHAR, environment VARCHAR,
        dataset_version VARCHAR, split VARCHAR, model VARCHAR, harness VARCHAR,
        prompt_template VARCHAR, sampling_json VARCHAR, repeats INTEGER, shard_count INTEGER,
        verifier_version VARCHAR""",
        key=("run_id",),
    ),
    _table(
        "shards",
        "run_id VARCHAR, shard_index INTEGER, shard_count INTEGER",
        key=("run_id", "shard_index"),
    ),
    _table(
        "tasks",
        """run_id VARCHAR, task_id VARCHAR, task_index INTEGER, shard_index INTEGER,
        prompt VARCHAR, reference VARCHAR, data_json VARCHAR, tags VARCHAR[],
        difficulty VARCHAR""",
        key=("run_id", "task_id"),
    ),
    _table(
        "rollouts",
        """rollout_id VARCHAR, run_id VARCHAR, task_id VARCHAR, repeat_index INTEGER,
        seed BIGINT, status VARCHAR, failure_kind VARCHAR, error VARCHAR, incomplete BOOLEAN,
        output_text VARCHAR, trajectory_json VARCHAR, num_turns INTEGER,
        num_model_calls INTEGER, input_tokens BIGINT, output_tokens BIGINT, latency_s DOUBLE,
        started_at TIMESTAMP, finished_at TIMESTAMP, counters_json VARCHAR""",
        key=("rollout_id",),
    ),
    _table(
        "model_calls",
        """rollout_id VARCHAR, call_index INTEGER, attempt INTEGER, status VARCHAR,
        failure_kind VARCHAR, http_status INTEGER, latency_s DOUBLE, input_tokens BIGINT,
        cached_tokens BIGINT, output_tokens BIGINT, reasoning_tokens BIGINT,
        sampling_json VARCHAR, request_json VARCHAR, response_json VARCHAR, error VARCHAR""",
    ),
    _table(
        "verifier_versions",
        """verifier_version VARCHAR, verifier_name VARCHAR, params_json VARCHAR,
        source VARCHAR, created_at TIMESTAMP, code_hash VARCHAR""",
        key=("verifier_version",),
        added=("code_hash",),
    ),
    _table(
        "verifications",
        """rollout_id VARCHAR, verifier_version VARCHAR, status VARCHAR, reward DOUBLE,
        passed BOOLEAN, failure_kind VARCHAR, details_json VARCHAR, created_at TIMESTAMP,
        seal VARCHAR""",
        key=("rollout_id", "verifier_version"),
        # the verdict's keyed MAC (`store/seal.py`); NULL in a store written before the seal
        added=("seal",),
    ),
    # The tool lists model calls refer to, each stored once (`store/tool_lists.py`).
    _table("tool_lists", "tools_id VARCHAR, tools_json VARCHAR", key=("tools_id",)),
)

#: Attempts set aside when a resume runs a failed rollout again, or a reverify judges an errored
#: verification again: the evidence of what happened first. Each table is its live table's
#: columns plus the attempt number (1 for the first) and when it was set aside; readers of the
#: live tables see only the latest attempt, so nothing counts twice.
SUPERSEDED_OF = ("rollouts", "model_calls", "verifications")
SUPERSEDED_EXTRA = (Column("rollout_attempt", "INTEGER"), Column("superseded_at", "TIMESTAMP"))

_BY_NAME = {spec.name: spec for spec in SPECS}
SPECS += tuple(
    Table(f"superseded_{name}", _BY_NAME[name].columns + SUPERSEDED_EXTRA) for name in SUPERSEDED_OF
)

#: The DDL of every table, by name, in creation order.
TABLES: dict[str, str] = {spec.name: spec.ddl for spec in SPECS}

#: Columns added after a table was first shipped: added to older stores when opened for writing.
ADDED_COLUMNS: tuple[str, ...] = tuple(ddl for spec in SPECS for ddl in spec.added_columns())

#: Column order of each table: the order rows are built and bulk-inserted in.
COLUMNS: dict[str, tuple[str, ...]] = {spec.name: spec.column_names for spec in SPECS}
