"""The SQL of the diagnosis over the store's tables: its one join of the rollouts with their
verdicts, grouped (`rollout_groups_sql`), and what reads the groups: the tasks' buckets, the
failures, the evidence (the rollouts that failed or passed without an answer, with the signs
the analysis reads in them) and the uncut rollouts' answer forms. The classifications, signs
and classes are the analysis's (`gymflow.analysis.diagnose` and `.evidence` pass them as SQL);
the joins that feed them are here."""

from __future__ import annotations

from gymflow.store.db import first_rollouts_sql
from gymflow.store.handle import Connection, one_row
from gymflow.store.queries.answers import no_answer_sql
from gymflow.store.queries.scores import SCORED_SQL


def rollout_groups_sql(
    category: str, kind: str, keys: str, named: str, details: str, examples: int
) -> str:
    """SQL (one `?`: the verifier version): diagnose's one join of the stored rollouts with
    their verdicts under that version, grouped by `keys`: what every section reads of a rollout
    (its task's counts, its category and evidence if it failed, whether a suspect names it,
    its answer's form) from the same pass, never joined again, and no table holds a row per
    rollout. A task's rollouts repeat a few outputs and answers, so what is read in an output
    is read once per distinct one.

    `keys` are columns over `f`, one row per stored rollout: rollout_id, task_id, repeat_index,
    incomplete, trajectory_json, output_text, details_json; `scored` (completed with an ok
    verdict), `passed` (its verdict's), `failing` (did not pass: not completed, unjudged, or
    judged and not passed), `unanswered` (scored and passed with no answer at all, NULL for a
    rollout not scored and passed), `d` (its verdict's details at the JSON paths `details`, a
    list literal), and `category` and `kind` (`category` and `kind` over rollouts `r` and
    verdicts `v`; NULL for a rollout that passed). Each group: task_id, the keys, `rollouts`
    (how many) and `first` (its first `examples`, `first_rollouts_sql`, of the rollouts `named`
    over `f` selects: those a section names; NULL for a group of none, most of a run's)."""
    first = first_rollouts_sql(examples)
    if examples > 0:
        first += f" FILTER (WHERE {named})"
    failing = "NOT (r.status = 'completed' AND coalesce(v.status = 'ok' AND v.passed, FALSE))"
    return f"""
        WITH f AS (
            SELECT r.rollout_id, r.task_id, r.repeat_index, r.incomplete, r.trajectory_json,
                   r.output_text, v.details_json, {SCORED_SQL} AS scored, v.passed,
                   {failing} AS failing,
                   CASE WHEN {SCORED_SQL} AND v.passed THEN {no_answer_sql("r")} END
                     AS unanswered,
                   json_extract_string(v.details_json, {details}) AS d,
                   CASE WHEN {failing} THEN {category} END AS category,
                   CASE WHEN {failing} THEN {kind} END AS kind
            FROM rollouts r
            LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        )
        SELECT task_id, {keys}, count(*) AS rollouts, {first} AS first
        FROM f GROUP BY ALL
    """


def task_buckets_sql(bucket: str) -> str:
    """SQL for one row per task in the store: task_id, n (scored rollouts) and c (passing), as
    `scores.task_counts_sql` counts them, from `diag_rollouts` (`rollout_groups_sql`), and
    `bucket` over n and c."""
    return f"""
        SELECT task_id, n, c, {bucket} AS bucket
        FROM (
            SELECT t.task_id, coalesce(k.n, 0) AS n, coalesce(k.c, 0) AS c
            FROM tasks t
            LEFT JOIN (
                SELECT task_id, sum(rollouts) FILTER (WHERE scored)::BIGINT AS n,
                       sum(rollouts) FILTER (WHERE scored AND coalesce(passed, FALSE))::BIGINT
                         AS c
                FROM diag_rollouts GROUP BY task_id
            ) k USING (task_id)
        )
    """


def failures_sql() -> str:
    """SQL for the groups of `diag_rollouts` that did not pass, with their task's bucket (from
    `diag_tasks`; 'unknown_task' for a task it lacks)."""
    return """
        SELECT g.*, coalesce(t.bucket, 'unknown_task') AS bucket
        FROM diag_rollouts g LEFT JOIN diag_tasks t ON t.task_id = g.task_id
        WHERE g.failing
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


def evidence_sql(inputs: str, signs: str, klass: str) -> str:
    """SQL for the evidence, in the groups of `diag_rollouts` (`rollout_groups_sql`): task_id,
    bucket, class, kind, rollouts, first. Every group of `diag_failures`: the columns `inputs`
    makes over it (`f`) and its task `t`, then its `signs` over those columns, classed by
    `klass` over the signs (each a level of its own, so a piece many signs read is computed
    once); and every group of `diag_rollouts` that passed without an answer, classed
    `passed_unanswered`."""
    return f"""
        WITH inputs AS (
            SELECT f.task_id, f.bucket, f.kind, f.rollouts, f.first, {inputs}
            FROM diag_failures f LEFT JOIN tasks t ON t.task_id = f.task_id
        ),
        signs AS (SELECT task_id, bucket, rollouts, first, {signs} FROM inputs)
        SELECT task_id, bucket, {klass} AS class, kind, rollouts, first FROM signs
        UNION ALL
        SELECT g.task_id, coalesce(d.bucket, 'unknown_task'), 'passed_unanswered', NULL,
               g.rollouts, g.first
        FROM diag_rollouts g LEFT JOIN diag_tasks d ON d.task_id = g.task_id
        WHERE g.passed_without_answer
        """


def uncut_forms(con: Connection) -> tuple[int, int]:
    """(formless, formed): among the completed, uncut rollouts with an ok verdict, those whose
    verdict's reason is one of the verifier's no-answer reasons (it found no answer in its
    form) and the rest, from `diag_rollouts`' `uncut_formless` (NULL for any other rollout)."""
    formless, formed = one_row(
        con,
        """
        SELECT coalesce(sum(rollouts) FILTER (WHERE uncut_formless), 0)::BIGINT,
               coalesce(sum(rollouts) FILTER (WHERE NOT uncut_formless), 0)::BIGINT
        FROM diag_rollouts
        """,
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
