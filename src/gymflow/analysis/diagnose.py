"""Why tasks fail: outcome buckets per task, a failure taxonomy over rollouts, the sometimes-pass
tasks worth reading, and rollouts whose verdict looks wrong (verifier suspects).

Every rollout that did not pass gets exactly one category, the first that applies in this order
(the earliest cause explains the rest): model failure (the rollout failed with a model error
kind), tool error (the resources server crashed: the rollout failed, or, kind
`tool_server_error`, it went on past a failed tool's answer as NeMo Gym's agent does), harness
error, tools not called (the run offered tools and its server ignored them:
`answers.tools_ignored_sql`; the text the model wrote instead, cut at the limit or not, follows
from that), truncated (incomplete response: output-token limit), unverified, verifier error
(including judge failures), harness max turns (a multi-turn rollout the harness stopped at its
turn limit: a single-turn rollout never is, its function call is its answer, nor a completed
external agent's, which reports its own limit), harness malformed tool call, tool error
reported to the model, answer in another form (the verifier found no answer in the form it
reads, a reason its verifier declares as such, yet the expected answer appears elsewhere in the
text, or the verifier's own lenient reading finds it), no answer (such a reason, and the
expected answer found nowhere), wrong answer."""

from __future__ import annotations

import polars as pl

from gymflow.analysis.environment import no_answer_reasons
from gymflow.analysis.evidence import evidence as evidence_of
from gymflow.analysis.evidence import failing_inputs, prepare_unrecorded
from gymflow.analysis.evidence import prepare as prepare_evidence
from gymflow.analysis.frames import frame
from gymflow.analysis.health_checks import TOOL_SERVER_ERROR
from gymflow.analysis.outcomes import check_verifier_version
from gymflow.analysis.results import (
    Bucket,
    Diagnosis,
    FailureRow,
    SometimesPass,
    Suspect,
    TaxonomyRow,
)
from gymflow.models.errors import ModelError
from gymflow.store.db import memory_capped_call, merged_first_sql
from gymflow.store.queries.answers import (
    appears_in_sql,
    called_sql,
    normalised_sql,
    tools_ignored_sql,
)
from gymflow.store.queries.diagnosis import (
    failures_sql,
    judged_of_tasks_sql,
    rollout_groups_sql,
    task_buckets_sql,
    with_reference_sql,
)
from gymflow.store.queries.rollouts import stored_and_expected
from gymflow.store.queries.verdicts import disagreements
from gymflow.store.runs import run_info
from gymflow.verifiers.base import LENIENT_MATCH

CATEGORIES = (
    "model_failure",
    "tool_error",
    "harness_error",
    "tools_not_called",
    "truncated",
    "unverified",
    "verifier_error",
    "harness_max_turns",
    "harness_malformed_tool_call",
    "answer_in_other_form",
    "no_answer",
    "wrong_answer",
)


def _model_kinds() -> list[str]:
    kinds, stack = set(), [ModelError]
    while stack:
        cls = stack.pop()
        kinds.add(cls.kind)
        stack.extend(cls.__subclasses__())
    return sorted(kinds)


def _quoted(values: list[str] | tuple[str, ...]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _counter(name: str) -> str:
    return f"coalesce(TRY_CAST(json_extract(r.counters_json, '$.{name}') AS INTEGER), 0)"


_LAST_ITEM = "json_extract_string(r.trajectory_json, '$[#-1].type')"
#: Harnesses whose last tool call is no sign of a turn limit: single_turn's call is its answer,
#: and an external agent (`command`) says it stopped at its limit by its failure kind
#: (`agent_step_limit`); its trajectory ends with the output of its last command either way.
_OWN_TURN_ENDS = ("single_turn", "command")


def _classify_sql(no_answer: tuple[str, ...], harness: str | None) -> tuple[str, str]:
    """SQL over rollouts `r` and verifications `v`: (category, kind) of a non-passing rollout;
    `no_answer` are the reasons the verifier declares as "no answer in the expected form", and
    `harness` the run's."""
    reason = "json_extract_string(v.details_json, '$.reason')"
    missing = f"{reason} IN ({_quoted(no_answer)})" if no_answer else "FALSE"
    expected = "json_extract_string(v.details_json, '$.expected')"
    lenient = f"json_extract(v.details_json, '$.{LENIENT_MATCH}') IS NOT NULL"
    category = f"""
        CASE
          WHEN r.status <> 'completed' AND r.failure_kind IN ({_quoted(_model_kinds())})
            THEN 'model_failure'
          WHEN r.status <> 'completed' AND r.failure_kind = 'tool_error' THEN 'tool_error'
          WHEN r.status <> 'completed' THEN 'harness_error'
          WHEN {_counter("tool_server_errors")} > 0 THEN 'tool_error'
          WHEN r.rollout_id IN (SELECT rollout_id FROM diag_tools_ignored)
            THEN 'tools_not_called'
          WHEN r.incomplete THEN 'truncated'
          WHEN v.rollout_id IS NULL THEN 'unverified'
          WHEN v.status <> 'ok' THEN 'verifier_error'
          WHEN {_counter("max_turns_reached")} > 0
               OR (coalesce(r.num_turns, 1) > 1
                   AND {harness not in _OWN_TURN_ENDS}
                   AND {called_sql("r.trajectory_json")}
                   AND {_LAST_ITEM} IN ('function_call', 'function_call_output'))
            THEN 'harness_max_turns'
          WHEN {_counter("malformed_tool_calls")} > 0 THEN 'harness_malformed_tool_call'
          WHEN {_counter("tool_errors")} > 0 THEN 'tool_error'
          WHEN {missing} AND ({lenient} OR {appears_in_sql(expected, "r.output_text")})
            THEN 'answer_in_other_form'
          WHEN {missing} THEN 'no_answer'
          ELSE 'wrong_answer'
        END"""
    kind = f"""
        CASE
          WHEN r.status <> 'completed' THEN coalesce(r.failure_kind, 'unknown')
          WHEN {_counter("tool_server_errors")} > 0 THEN '{TOOL_SERVER_ERROR}'
          WHEN v.status <> 'ok' THEN coalesce(v.failure_kind, 'verifier_error')
          ELSE coalesce({reason}, '')
        END"""
    return category, kind


def _bucket_sql() -> str:
    return """CASE WHEN n = 0 THEN 'missing' WHEN c = n THEN 'always_pass'
                   WHEN c = 0 THEN 'never_pass' ELSE 'sometimes_pass' END"""


#: The verdict's details the sections read, as `d[1]` to `d[4]` (`rollout_groups_sql`).
_DETAILS = f"['$.extracted', '$.expected', '$.reason', '$.{LENIENT_MATCH}']"


def _unanswered_sql(no_answer: tuple[str, ...]) -> str:
    """SQL over a scored rollout `f`: it passed without an answer, none given or one its
    verifier's reason says is not in its form."""
    missing = f"f.d[3] IN ({_quoted(no_answer)})" if no_answer else "FALSE"
    return f"f.passed AND (f.unanswered OR {missing})"


def _named_sql(no_answer: tuple[str, ...]) -> str:
    """SQL over a rollout `f`: a section may name it as an example (it failed, or passed
    without an answer)."""
    return f"f.failing OR coalesce(f.scored AND {_unanswered_sql(no_answer)}, FALSE)"


def _keys_sql(no_answer: tuple[str, ...]) -> str:
    """SQL over a stored rollout `f` (`rollout_groups_sql`): what diag_rollouts groups the
    rollouts by. Whether it was scored and passed (the task's counts); for one that did not
    pass, its category and kind and all the evidence's signs read (`evidence.failing_inputs`,
    its verdict's details), NULL otherwise, so a task's passing rollouts make one group or a
    few; whether a verifier suspect names it; and, for an uncut scored rollout, whether its
    verdict's reason says no answer was found in the verifier's form."""
    missing = f"f.d[3] IN ({_quoted(no_answer)})" if no_answer else "FALSE"
    failing = {
        "category": "f.category",
        "kind": "f.kind",
        **failing_inputs(),
        "reason": "f.d[3]",
        "extracted": "f.d[1]",
        "given": "f.d[2]",
        "lenient": f"json_extract(f.details_json, '$.{LENIENT_MATCH}') IS NOT NULL",
    }
    no_answer_list = f"[{_quoted(no_answer)}]::VARCHAR[]"
    return ", ".join(
        [
            "f.scored",
            "f.passed",
            "f.failing",
            *(f"CASE WHEN f.failing THEN {sql} END AS {name}" for name, sql in failing.items()),
            f"CASE WHEN f.scored THEN {_unanswered_sql(no_answer)} END AS passed_without_answer",
            (
                "CASE WHEN f.scored AND NOT f.passed THEN f.d[4] IS NOT NULL"
                f" AND NOT coalesce({missing}, FALSE) END AS lenient_reading_passes"
            ),
            (
                "CASE WHEN f.scored AND NOT coalesce(f.incomplete, FALSE)"
                f" THEN list_contains({no_answer_list}, f.d[3]) END AS uncut_formless"
            ),
        ]
    )


def _prepare(
    con, version: str, no_answer: tuple[str, ...], harness: str | None, examples: int
) -> None:
    """Temp tables shared by the sections: diag_tools_ignored (the rollouts offered tools their
    server ignored), diag_unrecorded (`evidence.prepare_unrecorded`), diag_rollouts (the one
    join of the rollouts with their verdicts, grouped: `rollout_groups_sql` by `_keys_sql`),
    diag_tasks (bucket per task) and diag_failures (diag_rollouts' groups that did not pass,
    with their bucket)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE diag_tools_ignored AS {tools_ignored_sql()}")
    prepare_unrecorded(con)
    category, kind = _classify_sql(no_answer, harness)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE diag_rollouts AS "
        + rollout_groups_sql(
            category,
            kind,
            _keys_sql(no_answer),
            _named_sql(no_answer),
            _DETAILS,
            examples,
        ),
        [version],
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE diag_tasks AS {task_buckets_sql(_bucket_sql())}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE diag_failures AS {failures_sql()}")


def buckets(con) -> dict[str, Bucket]:
    """{bucket: Bucket} for always_pass, sometimes_pass, never_pass and missing (no scored
    rollout)."""
    rows = con.execute(
        "SELECT bucket, count(*), list(task_id ORDER BY task_id) FROM diag_tasks GROUP BY bucket"
    ).fetchall()
    total = sum(count for _, count, _ in rows) or 1
    found = {bucket: (count, ids) for bucket, count, ids in rows}
    return {
        name: Bucket(
            tasks=found.get(name, (0, []))[0],
            share=found.get(name, (0, []))[0] / total,
            task_ids=found.get(name, (0, []))[1],
        )
        for name in ("always_pass", "sometimes_pass", "never_pass", "missing")
    }


def failure_detail(con, examples: int) -> pl.DataFrame:
    """category x kind x bucket: rollouts and example rollout ids, from diag_failures."""
    return frame(
        con,
        f"""
        SELECT category, kind, bucket, sum(rollouts)::BIGINT AS rollouts,
               {merged_first_sql("first", examples)} AS examples
        FROM diag_failures GROUP BY ALL ORDER BY rollouts DESC, category, kind, bucket
        """,
    )


def taxonomy(detail: pl.DataFrame, examples: int) -> list[TaxonomyRow]:
    """Non-passing rollouts per category and kind, most first."""
    total = int(detail["rollouts"].sum()) if detail.height else 0
    if not total:
        return []
    grouped = (
        detail.group_by("category", "kind")
        .agg(
            pl.col("rollouts").sum(),
            pl.col("examples").list.explode(keep_nulls=False, empty_as_null=False).head(examples),
        )
        .sort(["rollouts", "category", "kind"], descending=[True, False, False])
    )
    return [
        TaxonomyRow(**row, share=row["rollouts"] / total)
        for row in grouped.select("category", "kind", "rollouts", "examples").to_dicts()
    ]


def sometimes_pass(con, version: str, *, top: int, excerpt: int) -> list[SometimesPass]:
    """The sometimes-pass tasks, most variable first (p(1 - p) descending, then task_id), each
    with its first passing and first failing rollout: id, repeat and an output excerpt."""
    rows = frame(
        con,
        f"""
        WITH ranked AS (
            SELECT task_id, n, c, c / n AS pass_rate, (c / n) * (1 - c / n) AS variance
            FROM diag_tasks WHERE bucket = 'sometimes_pass'
            ORDER BY variance DESC, task_id LIMIT {int(top)}
        ),
        scored AS ({judged_of_tasks_sql("ranked", excerpt)}),
        sides AS (
            SELECT task_id,
                   arg_min({{'rollout_id': rollout_id, 'repeat_index': repeat_index,
                             'output': output}}, repeat_index) FILTER (WHERE passed) AS passing,
                   arg_min({{'rollout_id': rollout_id, 'repeat_index': repeat_index,
                             'output': output}}, repeat_index) FILTER (WHERE NOT passed)
                     AS failing
            FROM scored GROUP BY task_id
        )
        SELECT ranked.task_id, n, c, pass_rate, variance, passing, failing
        FROM ranked JOIN sides USING (task_id)
        ORDER BY variance DESC, task_id
        """,
        [version],
    ).to_dicts()
    return [SometimesPass.model_validate(row) for row in rows]


def verifier_suspects(con, version: str, *, examples: int) -> list[Suspect]:
    """Rollouts whose verdict looks wrong, one Suspect per kind, from diag_rollouts' groups
    (`_prepare`: a task's failed rollouts share a few distinct extracted answers, so the
    regexes normalise each distinct answer once and a rollout is counted, never joined back):

    - extracted_equals_reference: the verifier extracted an answer equal to the expected one
      (as text after normalisation, or as numbers) yet did not pass it;
    - lenient_reading_passes: failed on an answer in the expected form, yet the verifier's own
      lenient reading (`details.lenient_match`) finds the expected answer in the response;
    - passed_without_answer: passed with no answer at all (no text and no function call: a
      function call is an answer) or with a reason its verifier declares as no answer;
    - versions_disagree:A|B: rollouts the version read (A) and another stored version (B)
      judge differently."""
    suspects = []
    extracted, expected = normalised_sql("extracted"), normalised_sql("raw_expected")
    rows = con.execute(
        f"""
        WITH answers AS (
            {with_reference_sql("diag_rollouts", "given")}
            WHERE g.scored AND NOT g.passed AND g.extracted IS NOT NULL
        ),
        flagged AS (
            SELECT 'extracted_equals_reference' AS kind, rollouts, first FROM answers
            WHERE {extracted} <> ''
              AND ({extracted} = {expected}
                   OR TRY_CAST({extracted} AS DOUBLE) = TRY_CAST({expected} AS DOUBLE))
            UNION ALL
            SELECT 'passed_without_answer', rollouts, first FROM diag_rollouts
            WHERE passed_without_answer
            UNION ALL
            SELECT 'lenient_reading_passes', rollouts, first FROM diag_rollouts
            WHERE lenient_reading_passes
        )
        SELECT kind, sum(rollouts)::BIGINT, {merged_first_sql("first", examples)}
        FROM flagged GROUP BY kind ORDER BY kind
        """
    ).fetchall()
    descriptions = {
        "extracted_equals_reference": "extracted answer equals the expected answer after "
        "normalisation, but the rollout did not pass",
        "lenient_reading_passes": "the answer the verifier read failed, yet a lenient reading "
        "of the same response finds the expected answer (a verifier parameter that rejects "
        "right answers)",
        "passed_without_answer": "passed with no answer (no text and no function call), or with "
        "a reason its verifier declares as no answer in the expected form",
    }
    for kind, count, ids in rows:
        suspects.append(
            Suspect(kind=kind, description=descriptions[kind], count=count, examples=ids)
        )
    for version_a, version_b, count, ids in disagreements(con, version, examples):
        suspects.append(
            Suspect(
                kind=f"versions_disagree:{version_a}|{version_b}",
                description=f"verifier versions {version_a} and {version_b} disagree",
                count=count,
                examples=ids,
            )
        )
    return suspects


@memory_capped_call
def diagnose(
    con,
    *,
    verifier_version: str | None = None,
    examples: int = 5,
    top: int = 20,
    excerpt: int = 2000,
) -> Diagnosis:
    """Diagnose the run in `con` under one verifier version (the newest unless given).

    The decision is apart: `gymflow.analysis.decide.decide`."""

    version = check_verifier_version(con, verifier_version)
    run = run_info(con)
    no_answer = no_answer_reasons(con, version)
    _prepare(con, version, no_answer, run.harness, examples)
    prepare_evidence(con, no_answer)
    detail = failure_detail(con, examples)
    stored, expected = stored_and_expected(con)
    return Diagnosis(
        run_id=run.run_id,
        verifier_version=version,
        rollouts=stored,
        expected=expected,
        missing_rollouts=max(0, expected - stored),
        non_passing_rollouts=int(detail["rollouts"].sum()) if detail.height else 0,
        buckets=buckets(con),
        taxonomy=taxonomy(detail, examples),
        failures_by_bucket=[FailureRow.model_validate(row) for row in detail.to_dicts()],
        sometimes_pass=sometimes_pass(con, version, top=top, excerpt=excerpt),
        verifier_suspects=verifier_suspects(con, version, examples=examples),
        evidence=evidence_of(con, version, no_answer, examples=examples),
    )
