"""The DuckDB schema of a run store: one file per run or shard, one writer process at a time."""

from __future__ import annotations

SCHEMA_VERSION = 1

TABLES: dict[str, str] = {
    "meta": """
        CREATE TABLE IF NOT EXISTS meta (
            key VARCHAR PRIMARY KEY,
            value VARCHAR
        )""",
    "runs": """
        CREATE TABLE IF NOT EXISTS runs (
            run_id VARCHAR PRIMARY KEY,
            created_at TIMESTAMP,
            gymflow_version VARCHAR,
            config_json VARCHAR,
            config_hash VARCHAR,
            benchmark VARCHAR,
            benchmark_version VARCHAR,
            environment VARCHAR,
            dataset_version VARCHAR,
            split VARCHAR,
            model VARCHAR,
            harness VARCHAR,
            prompt_template VARCHAR,
            sampling_json VARCHAR,
            repeats INTEGER,
            shard_count INTEGER,
            verifier_version VARCHAR
        )""",
    "shards": """
        CREATE TABLE IF NOT EXISTS shards (
            run_id VARCHAR,
            shard_index INTEGER,
            shard_count INTEGER,
            PRIMARY KEY (run_id, shard_index)
        )""",
    "tasks": """
        CREATE TABLE IF NOT EXISTS tasks (
            run_id VARCHAR,
            task_id VARCHAR,
            task_index INTEGER,
            shard_index INTEGER,
            prompt VARCHAR,
            reference VARCHAR,
            data_json VARCHAR,
            tags VARCHAR[],
            difficulty VARCHAR,
            PRIMARY KEY (run_id, task_id)
        )""",
    "rollouts": """
        CREATE TABLE IF NOT EXISTS rollouts (
            rollout_id VARCHAR PRIMARY KEY,
            run_id VARCHAR,
            task_id VARCHAR,
            repeat_index INTEGER,
            seed BIGINT,
            status VARCHAR,
            failure_kind VARCHAR,
            error VARCHAR,
            incomplete BOOLEAN,
            output_text VARCHAR,
            trajectory_json VARCHAR,
            num_turns INTEGER,
            num_model_calls INTEGER,
            input_tokens BIGINT,
            output_tokens BIGINT,
            latency_s DOUBLE,
            started_at TIMESTAMP,
            finished_at TIMESTAMP,
            counters_json VARCHAR
        )""",
    "model_calls": """
        CREATE TABLE IF NOT EXISTS model_calls (
            rollout_id VARCHAR,
            call_index INTEGER,
            attempt INTEGER,
            status VARCHAR,
            failure_kind VARCHAR,
            http_status INTEGER,
            latency_s DOUBLE,
            input_tokens BIGINT,
            cached_tokens BIGINT,
            output_tokens BIGINT,
            reasoning_tokens BIGINT,
            sampling_json VARCHAR,
            request_json VARCHAR,
            response_json VARCHAR,
            error VARCHAR
        )""",
    "verifier_versions": """
        CREATE TABLE IF NOT EXISTS verifier_versions (
            verifier_version VARCHAR PRIMARY KEY,
            verifier_name VARCHAR,
            params_json VARCHAR,
            source VARCHAR,
            created_at TIMESTAMP,
            code_hash VARCHAR
        )""",
    "verifications": """
        CREATE TABLE IF NOT EXISTS verifications (
            rollout_id VARCHAR,
            verifier_version VARCHAR,
            status VARCHAR,
            reward DOUBLE,
            passed BOOLEAN,
            failure_kind VARCHAR,
            details_json VARCHAR,
            created_at TIMESTAMP,
            PRIMARY KEY (rollout_id, verifier_version)
        )""",
}

#: Attempts set aside when a resume runs a failed rollout again, or a reverify judges an errored
#: verification again: the evidence of what happened first. Each table is its live table's
#: columns plus the attempt number (1 for the first) and when it was set aside; readers of the
#: live tables see only the latest attempt, so nothing counts twice.
SUPERSEDED: dict[str, str] = {
    f"superseded_{table}": f"""
        CREATE TABLE IF NOT EXISTS superseded_{table} AS
        SELECT *, 0::INTEGER AS rollout_attempt, NULL::TIMESTAMP AS superseded_at
        FROM {table} LIMIT 0"""
    for table in ("rollouts", "model_calls", "verifications")
}
TABLES.update(SUPERSEDED)

#: Columns added after a table was first shipped: added to older stores when opened for writing.
ADDED_COLUMNS = ("ALTER TABLE verifier_versions ADD COLUMN IF NOT EXISTS code_hash VARCHAR",)

# Column order of each table, used by the bulk writers.
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": (
        "run_id",
        "created_at",
        "gymflow_version",
        "config_json",
        "config_hash",
        "benchmark",
        "benchmark_version",
        "environment",
        "dataset_version",
        "split",
        "model",
        "harness",
        "prompt_template",
        "sampling_json",
        "repeats",
        "shard_count",
        "verifier_version",
    ),
    "tasks": (
        "run_id",
        "task_id",
        "task_index",
        "shard_index",
        "prompt",
        "reference",
        "data_json",
        "tags",
        "difficulty",
    ),
    "rollouts": (
        "rollout_id",
        "run_id",
        "task_id",
        "repeat_index",
        "seed",
        "status",
        "failure_kind",
        "error",
        "incomplete",
        "output_text",
        "trajectory_json",
        "num_turns",
        "num_model_calls",
        "input_tokens",
        "output_tokens",
        "latency_s",
        "started_at",
        "finished_at",
        "counters_json",
    ),
    "model_calls": (
        "rollout_id",
        "call_index",
        "attempt",
        "status",
        "failure_kind",
        "http_status",
        "latency_s",
        "input_tokens",
        "cached_tokens",
        "output_tokens",
        "reasoning_tokens",
        "sampling_json",
        "request_json",
        "response_json",
        "error",
    ),
    "verifications": (
        "rollout_id",
        "verifier_version",
        "status",
        "reward",
        "passed",
        "failure_kind",
        "details_json",
        "created_at",
    ),
}
