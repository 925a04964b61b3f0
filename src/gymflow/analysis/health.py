"""Health of a run's records: can its numbers be trusted? Runs the checks of
`health_checks` in one statement, and applies the gate to what they flag."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pyarrow as pa

from gymflow.analysis.environment import reward_spec
from gymflow.analysis.frames import frame
from gymflow.analysis.health_checks import (
    CHECKS,
    SEAL_MISMATCHES,
    SHARED_TABLES,
    TASK_CHECK,
    TASK_CHECK_DESCRIPTION,
    TASK_SQL,
    Check,
    Severity,
)
from gymflow.analysis.outcomes import check_verifier_version, version_read
from gymflow.analysis.results import Health
from gymflow.core.errors import UserError
from gymflow.store.checked_stores import check_seals_once
from gymflow.store.db import first_sql, memory_capped_call
from gymflow.store.named_paths import store_names
from gymflow.store.queries.rollouts import health_verdicts_sql, stored_count
from gymflow.store.queries.tasks import task_count
from gymflow.store.runs import max_repeats
from gymflow.store.seal import SealCheck, StoreSeal, older_state


class UnknownCheck(UserError, ValueError):
    """A gate that names a health check there is not (`--threshold NAME=SHARE`)."""


@dataclass(frozen=True, slots=True)
class Gate:
    """A check fails the run when its share of expected rollouts exceeds its threshold:
    `per_check` if given, else the check's own default, else `max_share` for integrity checks
    and `warning_max_share` (by default 1.0: never) for warnings. An integrity check beyond its
    threshold also makes the verdict unhealthy: one set of thresholds for both."""

    max_share: float = 0.0
    warning_max_share: float = 1.0
    per_check: dict[str, float] = field(default_factory=dict)

    def threshold(self, name: str, severity: Severity) -> float:
        if name in self.per_check:
            return self.per_check[name]
        own = CHECKS[name].threshold if name in CHECKS else None
        if own is not None:
            return own
        return self.max_share if severity == "integrity" else self.warning_max_share


def _set_variables(con, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if value is None:
            con.execute(f"RESET VARIABLE {name}")
        else:
            con.execute(f"SET VARIABLE {name} = ?", [value])


def _seal_mismatches(con, ids) -> None:
    """The rollout ids whose seal did not match (`check_seals`, computed outside DuckDB), as the
    temporary table the `seal_mismatch` check reads."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {SEAL_MISMATCHES} (id VARCHAR)")
    if ids is not None and len(ids):
        found = pa.table({"id": ids})
        con.register("seal_mismatches_found", found)
        try:
            con.execute(f"INSERT INTO {SEAL_MISMATCHES} SELECT id FROM seal_mismatches_found")
        finally:
            con.unregister("seal_mismatches_found")


def _flagged(con, queries: dict[str, str], max_examples: int) -> dict[str, tuple[int, list]]:
    """Run the checks' queries in one statement (three statements a check took 0.07 s of a
    small run's analysis): the distinct ids each flags go to the temporary table `check_ids`
    (check_name, id); returns, by check that flagged any, their count and the first ids."""
    con.execute("CREATE OR REPLACE TEMP TABLE check_ids (check_name VARCHAR, id VARCHAR)")
    if not queries:
        return {}
    con.execute(
        "INSERT INTO check_ids "
        + " UNION ALL ".join(f"SELECT DISTINCT ?, id FROM ({sql})" for sql in queries.values()),
        list(queries),
    )
    rows = con.execute(
        f"SELECT check_name, count(*), {first_sql('id', 'id', max_examples)} FROM check_ids "
        "GROUP BY check_name"
    ).fetchall()
    return {name: (count, examples or []) for name, count, examples in rows}


@memory_capped_call
def health(
    con,
    *,
    verifier_version: str | None = None,
    gate: Gate | None = None,
    max_examples: int = 20,
    max_listed: int | None = 1000,
    verify_seals: bool = False,
    seals: SealCheck | None = None,
) -> Health:
    """Run every check over the store. The seals are recomputed unless this store's file is
    unchanged since they all matched (`checked_stores.py`); `verify_seals` always recomputes.

    Returns the Health: {"verdict": "healthy" | "unhealthy" (an integrity check flagged more
    than its threshold), "gate": "pass" |
    "fail", "gate_failures": [check], "failing_checks": [check with any hit], "warnings":
    [warning check with any hit], "rollouts": stored, "expected": tasks x repeats,
    "unhealthy_rollouts": count, "unhealthy_share": float, "verifier_version": str,
    "reward_range": [low, high] | None,
    "checks": {name: {"description", "level", "severity", "status": "ok" | "failed" | "skipped",
    "count",
    "share", "threshold", "examples": [id]}},
    "rollout_verdicts": [{"rollout_id", "task_id", "repeat_index", "checks": [name]}] for the
    unhealthy rollouts only (the rest are healthy), at most `max_listed` (None: all),
    "rollout_verdicts_truncated": bool}. `seals`: the seal check of `con` the caller made for
    this analysis (`analysis.run.analyse`), in place of checking here."""
    gate = gate or Gate()
    unknown = set(gate.per_check) - set(CHECKS) - {TASK_CHECK}
    if unknown:
        raise UnknownCheck(f"no health check named {', '.join(sorted(unknown))}")
    version = check_verifier_version(con, verifier_version)
    spec = reward_spec(con)
    if seals is None:
        seals = check_seals_once(con, full=verify_seals)
    sealed = seals.store
    _seal_mismatches(con, seals.ids if sealed.state == "sealed" else None)
    variables = {
        "seal_state": sealed.state,
        "seal_legacy": sealed.legacy if sealed.state == "sealed" else None,
        "seal_checked": True if sealed.state == "sealed" else None,
        "task_list_sealed": sealed.tasks_sealed,
        "inputs_sealed": sealed.inputs_sealed,
        "rollouts_sealed": sealed.rollouts_sealed,
        "calls_sealed": sealed.calls_sealed,
        "verdicts_sealed": sealed.verdicts_sealed,
        "generation_ok": not sealed.older_state if sealed.state == "sealed" else None,
        "verifier_version": version,
        "repeats": max_repeats(con) or 0,
        "reward_low": spec.low if spec else None,
        "reward_high": spec.high if spec else None,
        "pass_threshold": spec.pass_threshold if spec else None,
        **{
            f"{name}_max": gate.threshold(name, CHECKS[name].severity)
            for name in ("failed_share", "no_answer_share")
        },
    }
    _set_variables(con, variables)
    for statement in SHARED_TABLES.values():
        con.execute(statement)
    con.execute("CREATE OR REPLACE TEMP TABLE health_hits (id VARCHAR, check_name VARCHAR)")
    expected, stored = task_count(con) * variables["repeats"], stored_count(con)
    denominator = max(expected, stored, 1)
    checks: dict[str, Any] = {}

    def record(name: str, check: Check, runnable: bool, found: dict[str, tuple[int, list]]):
        count, examples = found.get(name, (0, []))
        checks[name] = {
            "description": check.description,
            "level": check.level,
            "severity": check.severity,
            "threshold": gate.threshold(name, check.severity),
            "status": ("failed" if count else "ok") if runnable else "skipped",
            "count": count,
            "share": count / denominator,
            "examples": examples,
        }

    runnable = {
        name: all(variables[need] is not None for need in check.needs)
        for name, check in CHECKS.items()
    }
    found = _flagged(
        con, {name: check.sql for name, check in CHECKS.items() if runnable[name]}, max_examples
    )
    rollout_checks = [name for name, check in CHECKS.items() if check.level == "rollout"]
    con.execute(
        "INSERT INTO health_hits SELECT id, check_name FROM check_ids "
        "WHERE list_contains(?, check_name)",
        [rollout_checks],
    )
    for name, check in CHECKS.items():
        record(name, check, runnable[name], found)
    task_check = Check(TASK_CHECK_DESCRIPTION, TASK_SQL, "task", severity="warning")
    record(TASK_CHECK, task_check, True, _flagged(con, {TASK_CHECK: TASK_SQL}, max_examples))

    unhealthy = con.execute("SELECT count(DISTINCT id) FROM health_hits").fetchone()[0]
    verdicts = rollout_verdicts(con, unhealthy_only=True, limit=max_listed)
    failing = [name for name, check in checks.items() if check["count"]]
    gate_failures = [name for name, check in checks.items() if check["share"] > check["threshold"]]
    broken = [name for name in gate_failures if checks[name]["severity"] == "integrity"]
    for table in ("check_ids", SEAL_MISMATCHES, *SHARED_TABLES):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    return Health(
        verdict="unhealthy" if broken else "healthy",
        warnings=[name for name in failing if name not in broken],
        gate="fail" if gate_failures else "pass",
        gate_failures=gate_failures,
        failing_checks=failing,
        rollouts=stored,
        expected=expected,
        unhealthy_rollouts=unhealthy,
        unhealthy_share=unhealthy / denominator,
        verifier_version=version,
        version_read=version_read(con, version),
        reward_range=[spec.low, spec.high] if spec else None,
        checks=checks,
        rollout_verdicts=verdicts.to_dicts(),
        rollout_verdicts_truncated=max_listed is not None and unhealthy > max_listed,
        seal_notes=_seal_notes(con, sealed),
        seals_checked_at=None
        if seals.checked_at is None
        else datetime.fromtimestamp(seals.checked_at, UTC).replace(microsecond=0),
    )


def _seal_notes(con, sealed: StoreSeal) -> list[str]:
    """What the seals say that no count shows, one line each, naming the store by the path it
    was opened at (a link at a run's path to another store named that store's own path)."""
    if not sealed.older_state:
        return []
    return [f"{next(iter(store_names(con)), 'the store')}: {older_state(sealed)}"]


def rollout_verdicts(
    con, *, unhealthy_only: bool = False, limit: int | None = None
) -> pl.DataFrame:
    """Per-rollout verdict after `health(con)` ran on this connection: rollout_id, task_id,
    repeat_index, healthy (bool), checks (list of failed check names, empty when healthy)."""
    return frame(
        con, health_verdicts_sql("health_hits", unhealthy_only=unhealthy_only, limit=limit)
    )
