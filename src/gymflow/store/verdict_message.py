"""What a verdict's seal is the MAC of: the verdict's fields and what it judged, framed by DuckDB
into one message (`message_sql`). Every writer seals with it, every check recomputes it, and the
record of the verdict set (`sealed_rows.VERDICTS`) folds the same MACs, so it is stated once,
here, below both (`seal.py` computes the MACs, `sealed_rows.py` folds them)."""

from __future__ import annotations

from gymflow.store.sealed_inputs import framed

#: The verdict's columns a seal covers, in order (every one but its time).
SEALED_VERDICT = ("rollout_id", "verifier_version", "status", "failure_kind", "details_json")
#: The rollout's columns a seal covers: what was judged (final text, trajectory), and what the
#: scores read beside the verdict: which run, task and repeat it counts for (a verdict moved to
#: another task by editing `task_id` raised pass@k) and whether it counts at all (a failing
#: rollout's status set to an error is left out of every score). `rollout_id` alone does not
#: bind them: nothing recomputes it from them.
SEALED_ROLLOUT = (
    "run_id",
    "task_id",
    "repeat_index",
    "status",
    "failure_kind",
    "output_text",
    "trajectory_json",
)
#: The column a sealing or checking SELECT names its message (`message_sql`) with.
MESSAGE = "seal_message"
#: Every stored verdict beside its rollout (`v`, `r`): what a check reads the messages from.
JUDGED = "verifications v LEFT JOIN rollouts r USING (rollout_id)"


def message_sql(verdict: str, rollout: str, prefix: str = "") -> str:
    """THE message a verdict's seal is the MAC of, as a BLOB: SQL over a relation `verdict`
    holding the verdict's columns and `rollout` holding its rollout's `SEALED_ROLLOUT` columns,
    each named with `prefix` (one relation may be both, the rollout's columns then prefixed
    apart from the verdict's). Each value is framed as `bytes:text` (`sealed_inputs.framed`),
    one `concat` building the whole message: a chain of `||` copied it once per field, a third
    of its cost. The same framing stores sealed before carry."""
    parts = [framed(f"{verdict}.{name}") for name in SEALED_VERDICT]
    # a number and a boolean hold no `|`: as text, NULL as nothing
    parts += [f"{verdict}.reward", f"{verdict}.passed"]
    parts += [framed(f"{rollout}.{prefix}{name}") for name in SEALED_ROLLOUT]
    return "encode(concat(" + ", '|', ".join(parts) + "))"
