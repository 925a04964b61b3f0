"""The SQL of scores: which rollouts count, the per-task outcome counts profile, diagnose,
compare and data selection aggregate from, and a run's coverage. Each is one aggregate in
DuckDB; callers read its rows, never the rollouts."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row
from gymflow.store.queries.answers import extracted_sql, normalised_sql

SCORED_SQL = "v.status = 'ok' AND r.status = 'completed'"


def scored_filter(failures_as_zero: bool) -> str:
    """SQL predicate over rollouts `r` joined to verifications `v`: which rollouts count.

    With `failures_as_zero`, every stored rollout counts (failed ones as not passed, reward 0)."""
    return "r.rollout_id IS NOT NULL" if failures_as_zero else SCORED_SQL


def score_groups_sql(*, failures_as_zero: bool = False, answers: bool = False) -> str:
    """SQL (one `?`: the verifier version) yielding one row per task of the stored rollouts
    and, with `answers`, per answer its scored rollouts' verdicts extracted (`raw`, NULL for a
    rollout not scored or with none; always NULL without): n (scored rollouts), c (passing),
    reward_sum and reward_sq_sum over scored rollouts, stored, verified (completed with an ok
    verification). What the per-task counts and, with `answers`, the majority vote read: one
    join of the rollouts with their verdicts for both (profile joined them twice)."""
    scored = scored_filter(failures_as_zero)
    reward = "coalesce(v.reward, 0.0)" if failures_as_zero else "v.reward"
    raw = (
        f"CASE WHEN {scored} THEN {extracted_sql('v.details_json')} END"
        if answers
        else "NULL::VARCHAR"
    )
    return f"""
        SELECT r.task_id, {raw} AS raw,
               count(*) FILTER (WHERE {scored}) AS n,
               count(*) FILTER (WHERE {scored} AND coalesce(v.passed, FALSE)) AS c,
               sum({reward}) FILTER (WHERE {scored}) AS reward_sum,
               sum({reward} * {reward}) FILTER (WHERE {scored}) AS reward_sq_sum,
               count(*) AS stored,
               count(*) FILTER (WHERE {SCORED_SQL}) AS verified
        FROM rollouts r
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        GROUP BY ALL
    """


def task_counts_sql(*, failures_as_zero: bool = False, groups: str | None = None) -> str:
    """SQL yielding one row per task in the store: task_id, tags, difficulty, n (scored
    rollouts), c (passing), reward_sum and reward_sq_sum over scored rollouts, stored (rollouts
    stored) and verified (completed with an ok verification, the `scored` of coverage). Tasks
    with nothing scored have n = 0. Read from `groups`, a table `score_groups_sql` filled, when
    given (no parameter); else from that query (one `?`: the verifier version)."""
    source = groups or f"({score_groups_sql(failures_as_zero=failures_as_zero)})"
    # Aggregate on task_id alone, then attach tags and difficulty: grouping by a list column
    # (tags) costs more than the whole join at a million rollouts.
    return f"""
        WITH counts AS (
            SELECT task_id, sum(n)::BIGINT AS n, sum(c)::BIGINT AS c,
                   sum(reward_sum) AS reward_sum, sum(reward_sq_sum) AS reward_sq_sum,
                   sum(stored)::BIGINT AS stored, sum(verified)::BIGINT AS verified
            FROM {source} GROUP BY task_id
        )
        SELECT t.task_id, t.tags, t.difficulty,
               coalesce(k.n, 0) AS n, coalesce(k.c, 0) AS c,
               coalesce(k.reward_sum, 0.0) AS reward_sum,
               coalesce(k.reward_sq_sum, 0.0) AS reward_sq_sum,
               coalesce(k.stored, 0) AS stored, coalesce(k.verified, 0) AS verified
        FROM tasks t LEFT JOIN counts k USING (task_id)
        """


def coverage_counts(con: Connection, verifier_version: str) -> tuple[int, int, int]:
    """(expected, stored, scored): the run's tasks times its repeats, the rollouts stored, and
    those completed with an ok verdict under `verifier_version`."""
    expected, stored, scored = one_row(
        con,
        """
        SELECT
          (SELECT count(*) FROM tasks) * (SELECT max(repeats) FROM runs),
          (SELECT count(*) FROM rollouts),
          (SELECT count(*) FROM rollouts r JOIN verifications v USING (rollout_id)
            WHERE r.status = 'completed' AND v.verifier_version = ? AND v.status = 'ok')
        """,
        [verifier_version],
    )
    return expected, stored, scored


def majority_votes(con: Connection, groups: str) -> tuple[int, float | None]:
    """(answers voted, mean majority-vote score over tasks), from `groups`, a table
    `score_groups_sql(answers=True)` filled: a task's scored rollouts vote with their extracted
    answers after normalisation, the task scores the share of correct answers among the most
    voted ones (ties split evenly), 0 when nothing was extracted."""
    # The raw extracted strings are grouped first and only the distinct ones normalised: the
    # regexes then run on a few rows per task instead of on every rollout. A group with an
    # answer holds scored rollouts only: its votes are n, and it is correct when one passed.
    answer = normalised_sql("raw")
    voted, score = one_row(
        con,
        f"""
        WITH votes AS (
            SELECT task_id, {answer} AS answer, sum(n) AS votes, bool_or(c > 0) AS correct
            FROM {groups} WHERE raw IS NOT NULL GROUP BY ALL
        ),
        winners AS (
            SELECT task_id, avg(correct::DOUBLE) AS score
            FROM (SELECT *, max(votes) OVER (PARTITION BY task_id) AS top FROM votes
                  WHERE answer <> '')
            WHERE votes = top
            GROUP BY task_id
        )
        SELECT (SELECT count(*) FROM votes WHERE answer <> ''),
               avg(coalesce(w.score, 0.0))
        FROM (SELECT task_id FROM {groups} GROUP BY task_id HAVING sum(n) > 0) s
        LEFT JOIN winners w USING (task_id)
        """,
    )
    return voted, score


def task_judged_shares(
    con: Connection, verifier_version: str, tasks: list[str]
) -> list[tuple[str, float]]:
    """(task_id, share of its stored rollouts that ended judged under `verifier_version`: a
    completed rollout with a verdict, not a failure) for each of `tasks` with a rollout."""
    return con.execute(
        """
        SELECT r.task_id, avg(CASE WHEN v.status = 'ok' THEN 1.0 ELSE 0.0 END)
        FROM rollouts r
        LEFT JOIN verifications v
          ON v.rollout_id = r.rollout_id AND v.verifier_version = ? AND r.status = 'completed'
        WHERE list_contains(?, r.task_id)
        GROUP BY r.task_id
        """,
        [verifier_version, tasks],
    ).fetchall()


def task_pass_rates(
    con: Connection, verifier_version: str, tasks: list[str]
) -> list[tuple[str, float]]:
    """(task_id, share of its scored rollouts that passed under `verifier_version`) for each of
    `tasks` with a scored rollout."""
    return con.execute(
        """
        SELECT r.task_id, avg(CASE WHEN v.passed THEN 1.0 ELSE 0.0 END)
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.status = 'completed' AND v.status = 'ok' AND list_contains(?, r.task_id)
        GROUP BY r.task_id
        """,
        [verifier_version, tasks],
    ).fetchall()
