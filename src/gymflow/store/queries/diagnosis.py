"""The SQL of the diagnosis's evidence over the store's tables: the rollouts that are evidence
(failed, or passed without an answer) with the signs the analysis reads in them, and the uncut
rollouts' answer forms. The signs and the classes are the analysis's (`gymflow.analysis
.evidence` passes them as SQL over `r`, `v` and `t`); the joins that feed them are here."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row
from gymflow.store.queries.answers import no_answer_sql


def failures_sql(classify: str) -> str:
    """SQL (one `?`: the verifier version) for one row per stored rollout that did not pass
    (not completed, unjudged, or judged and not passed): rollout_id, task_id, repeat_index, its
    task's bucket (from `diag_tasks`), and the columns `classify` makes over rollouts `r` and
    verdicts `v`."""
    return f"""
        SELECT r.rollout_id, r.task_id, r.repeat_index, t.bucket, {classify}
        FROM rollouts r
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        LEFT JOIN diag_tasks t ON t.task_id = r.task_id
        WHERE NOT (r.status = 'completed' AND coalesce(v.status = 'ok' AND v.passed, FALSE))
    """


def judged_sql(details: str) -> str:
    """SQL (one `?`: the verifier version) for every completed rollout judged `ok`: rollout_id,
    task_id, repeat_index, passed, unanswered (a passing rollout without an answer; NULL for a
    failing one) and `d`, the fields of its verdict's details at the JSON paths `details` (a
    list literal)."""
    return f"""
        SELECT r.rollout_id, r.task_id, r.repeat_index, v.passed,
               CASE WHEN v.passed THEN {no_answer_sql("r")} END AS unanswered,
               json_extract_string(v.details_json, {details}) AS d
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.status = 'completed' AND v.status = 'ok'
    """


def judged_of_tasks_sql(tasks: str, excerpt: int) -> str:
    """SQL (one `?`: the verifier version) for the completed rollouts judged `ok` of the tasks
    in the relation `tasks` (a `task_id` column): task_id, rollout_id, repeat_index, passed and
    the first `excerpt` characters of the output."""
    return f"""
        SELECT r.task_id, r.rollout_id, r.repeat_index, v.passed,
               left(r.output_text, {int(excerpt)}) AS output
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.task_id IN (SELECT task_id FROM {tasks})
          AND r.status = 'completed' AND v.status = 'ok'
    """


def with_reference_sql(relation: str, given: str) -> str:
    """SQL for the rows of `relation` (as `g`, with a `task_id`) and `raw_expected`: the
    expected answer its column `given` holds, else its task's reference answer; a `WHERE` over
    `g` may follow."""
    return f"""
        SELECT g.*, coalesce(g.{given}, json_extract_string(t.data_json, '$.answer'))
                      AS raw_expected
        FROM {relation} g LEFT JOIN tasks t USING (task_id)
    """


def evidence_sql(inputs: str, signs: str, klass: str, missing: str) -> str:
    """SQL (two `?`: the verifier version, twice) for one row per rollout that is evidence:
    rollout_id, task_id, repeat_index, bucket, class, cut, formless. Every rollout of
    `diag_failures` (with its bucket): the columns `inputs` makes over it, its rollout `r`,
    verdict `v` and task `t`, then its `signs` over those columns, classed by `klass` over the
    signs (each a level of its own, so a piece many signs read is computed once); and every
    passing rollout without an answer (no answer given, or `missing`, a predicate over `v`),
    classed `passed_unanswered`."""
    return f"""
        WITH inputs AS (
            SELECT f.rollout_id, f.task_id, f.repeat_index,
                   coalesce(f.bucket, 'unknown_task') AS bucket, {inputs}
            FROM diag_failures f
            JOIN rollouts r USING (rollout_id)
            LEFT JOIN verifications v
              ON v.rollout_id = f.rollout_id AND v.verifier_version = ?
            LEFT JOIN tasks t ON t.task_id = f.task_id
        ),
        signs AS (SELECT rollout_id, task_id, repeat_index, bucket, {signs} FROM inputs)
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
