"""The SQL of the diagnosis's evidence over the store's tables: the rollouts that are evidence
(failed, or passed without an answer) with the signs the analysis reads in them, and the uncut
rollouts' answer forms. The signs and the classes are the analysis's (`gymflow.analysis
.evidence` passes them as SQL over `r`, `v` and `t`); the joins that feed them are here."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row
from gymflow.store.queries.answers import no_answer_sql


def evidence_sql(signs: str, klass: str, missing: str) -> str:
    """SQL (two `?`: the verifier version, twice) for one row per rollout that is evidence:
    rollout_id, task_id, repeat_index, bucket, class, cut, formless. Every rollout of
    `diag_failures` (with its bucket), its `signs` (columns over rollouts `r`, verdicts `v` and
    tasks `t`) classed by `klass`; and every passing rollout without an answer (no answer
    given, or `missing`, a predicate over `v`), classed `passed_unanswered`."""
    return f"""
        WITH signs AS (
            SELECT f.rollout_id, f.task_id, f.repeat_index,
                   coalesce(f.bucket, 'unknown_task') AS bucket, {signs}
            FROM diag_failures f
            JOIN rollouts r USING (rollout_id)
            LEFT JOIN verifications v
              ON v.rollout_id = f.rollout_id AND v.verifier_version = ?
            LEFT JOIN tasks t ON t.task_id = f.task_id
        )
        SELECT rollout_id, task_id, repeat_index, bucket, {klass} AS class, cut, formless
        FROM signs
        UNION ALL
        SELECT r.rollout_id, r.task_id, r.repeat_index, coalesce(d.bucket, 'unknown_task'),
               'passed_unanswered', coalesce(r.incomplete, FALSE), TRUE
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        LEFT JOIN diag_tasks d ON d.task_id = r.task_id
        WHERE r.status = 'completed' AND v.status = 'ok' AND v.passed
          AND ({no_answer_sql("r")} OR coalesce({missing}, FALSE))
        """


def uncut_forms(
    con: Connection, verifier_version: str, no_answer: tuple[str, ...]
) -> tuple[int, int]:
    """(formless, formed): among the completed, uncut rollouts with an ok verdict, those whose
    verdict's reason is one of `no_answer` (the verifier found no answer in its form) and the
    rest."""
    formless, formed = one_row(
        con,
        """
        WITH judged AS (
            SELECT list_contains(?::VARCHAR[], json_extract_string(v.details_json, '$.reason'))
                     AS formless
            FROM rollouts r
            JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
            WHERE r.status = 'completed' AND v.status = 'ok' AND NOT coalesce(r.incomplete, FALSE)
        )
        SELECT count(*) FILTER (WHERE formless), count(*) FILTER (WHERE NOT formless)
        FROM judged
        """,
        [list(no_answer), verifier_version],
    )
    return formless, formed


def unrecorded_sql(flagged: list[str], model_free: str) -> str:
    """The rollouts whose external agent's model-call record is broken: those any of the
    `flagged` queries (health checks, each selecting `id`) names, and, under the `command`
    harness, a model-using agent's rollout (`model_free`: SQL true for an agent that calls no
    model) with no model call at all."""
    union = " UNION ".join(f"SELECT id FROM ({sql})" for sql in flagged)
    return f"""
        SELECT id AS rollout_id FROM ({union})
        UNION
        SELECT rollout_id FROM rollouts r
        WHERE (SELECT max(harness) FROM runs) = 'command' AND NOT ({model_free})
          AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.rollout_id = r.rollout_id)
    """
