"""The evidence each next action's prediction is tested on: every rollout that did not pass
(and every pass without an answer) in exactly one evidence class, counted per task, in SQL.

A class says what the stored rollout shows, in this order (the first that applies):
- `unjudged`: the verifier failed to judge it, or never did;
- a rollout stopped at its turn or step limit while repeating one tool call is a `loop` (see
  below), before any harness class: the limit did not cost it the answer;
- `agent_failed`: an external agent ended it (`command` harness: crashed, timed out, stopped at
  its step limit, not installed, or its sandbox failed): the harness lost it, never the model;
- `unrecorded`: the agent's model-call record is broken (`AGENT_RECORD_CHECKS`: calls the
  recording proxy refused or took after the deadline, calls its own log counts and the proxy
  did not record, trajectory text no recorded call produced), or a model-using agent made no
  call at all: what was judged is not evidence of the model;
- `failed_call`: the rollout failed in the model call, the harness or a crashed tool, or went
  on past a tool whose server failed (`tool_server_error`);
- `echo`: the output copies the prompt back, holds a chat turn marker, or loops a placeholder
  (`gymflow.analysis.signs`): the model continues the prompt rather than answering the turn;
- `tools_ignored`: the run offered tools and its server ignored them (`answers`'s test);
- `serving`: the harness hit its turn limit, or a tool call was malformed;
- `lenient_right`: the verifier read an answer and failed it, yet its lenient reading (or the
  answer it read, normalised) is the expected answer;
- `other_form`: the verifier found no answer in the form it reads, yet the expected answer (or
  its lenient reading) is in the text; `cut_other_form` when the output was also cut at the
  output-token limit, so either the form or the limit may have cost it;
- `placeholder`: the output copies a placeholder of the prompt (`Answer: <city>`);
- `cut_on_way`: cut at the limit on its way to an answer: the answer's form had begun where it
  was cut (no answer read yet), the expected answer is in the cut text, the reference answer
  begins as it does, or another (uncut) repeat of the task passes; never a loop;
- `cut_astray`: cut at the limit and none of that (a loop, rambling);
- `loop`: a loop the model ended itself, or a rollout stopped at its turn or step limit (the
  harness's `max_turns`, an agent's `agent_step_limit`) while repeating one tool call
  (`calls_loop_sql`): stuck, not on its way, so the model's and not the limit's;
- `wrong`: a wrong answer, no answer, or a tool error reported to the model;
- `passed_unanswered`: passed with no answer at all, or with a reason its verifier declares as no
  answer in its form.

The hypotheses (`gymflow.analysis.hypotheses`) read these counts; the tasks' counts are kept as
patterns (a count vector and how many tasks share it) so a bootstrap over tasks resamples a few
hundred patterns, not ten million rollouts."""

from __future__ import annotations

import json

from gymflow.analysis.health_checks import (
    AGENT_RECORD_CHECKS,
    CHECKS,
    MODEL_FREE,
    TOOL_SERVER_ERROR,
)
from gymflow.analysis.results import Evidence, EvidencePattern
from gymflow.analysis.signs import (
    LOWER,
    calls_loop_sql,
    columns_sql,
    echo_sql,
    loop_sql,
    placeholder_sql,
    squeezed_sql,
    turn_marker_sql,
)
from gymflow.core.statuses import AGENT_FAILURES
from gymflow.store.db import merged_first_sql
from gymflow.store.queries.answers import appears_in_sql, normalised_sql
from gymflow.store.queries.diagnosis import evidence_sql, uncut_forms, unrecorded_sql
from gymflow.store.runs import config_json, repeats_and_sampling

CLASSES = (
    "unjudged",
    "agent_failed",
    "unrecorded",
    "failed_call",
    "echo",
    "tools_ignored",
    "serving",
    "lenient_right",
    "other_form",
    "cut_other_form",
    "placeholder",
    "cut_on_way",
    "cut_astray",
    "loop",
    "wrong",
    "passed_unanswered",
)

#: The end of a cut text where an answer's form had begun and the limit cut the answer itself:
#: an 'Answer:' with nothing after it, a \\boxed{ not closed, a code block not closed.
FORM_STARTED = r"answer\s*[:=]\s*\$?\s*$|\\boxed\{[^}]*$|```[a-z]*\n[^`]*$"
#: task ids kept per class and bucket: what a confirming experiment reruns, at most
TASK_IDS = 200

_FAILED_CALL = ("model_failure", "harness_error")
_SERVING = ("harness_max_turns", "harness_malformed_tool_call")
#: how a rollout stopped at its turn or step limit is recorded: (category, kind)
_AT_LIMIT = "f.category = 'harness_max_turns' OR f.kind = 'agent_step_limit'"


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values) or "NULL"


def failing_inputs() -> dict[str, str]:
    """{name: SQL} over a stored rollout `f` that did not pass (`store.queries.diagnosis
    .rollout_groups_sql`): what the signs read of it beyond its verdict's details, what
    diag_failures groups its rollouts by with those details (`reason`, `extracted`, `given`,
    `lenient`) and its category and kind."""
    return {
        "unrecorded": "f.rollout_id IN (SELECT rollout_id FROM diag_unrecorded)",
        "cut": "coalesce(f.incomplete, FALSE)",
        "stuck": f"CASE WHEN {_AT_LIMIT} THEN {calls_loop_sql('f.trajectory_json')} ELSE FALSE END",
        "output": "f.output_text",
    }


def _inputs_sql() -> str:
    """SQL over a group of diag_failures `f` and its task `t`: the columns the signs read, the
    output's and prompt's pieces (`signs.columns_sql`) among them."""
    return f"""
        f.category, f.kind, f.unrecorded, f.cut, f.stuck, f.output, f.reason, f.extracted,
        coalesce(f.given, json_extract_string(t.data_json, '$.answer')) AS expected, f.lenient,
        lower({squeezed_sql("t.reference")}) AS squeezed_reference,
        {columns_sql("f.output", "t.prompt")}
    """


def _signs_sql(no_answer: tuple[str, ...]) -> str:
    """SQL over `_inputs_sql`'s columns: the signs each class is decided by, one column each."""
    formless = f"coalesce(reason IN ({_quoted(no_answer)}), FALSE)"
    return f"""
        category, kind, unrecorded, cut, stuck, {formless} AS formless, lenient,
        {loop_sql()} AS looped,
        {echo_sql()} OR {turn_marker_sql("output")} AS echo,
        {placeholder_sql()} AS placeholder,
        {formless} AND regexp_matches(lower(right(coalesce(output, ''), 24)), '{FORM_STARTED}')
          AS form_started,
        {appears_in_sql("expected", "output")} AS expected_in_text,
        coalesce({normalised_sql("extracted")} <> ''
                 AND ({normalised_sql("extracted")} = {normalised_sql("expected")}
                      OR TRY_CAST({normalised_sql("extracted")} AS DOUBLE)
                         = TRY_CAST({normalised_sql("expected")} AS DOUBLE)), FALSE)
          AS extracted_right,
        coalesce(length({LOWER}) >= 8 AND starts_with(squeezed_reference, {LOWER}), FALSE)
          AS reference_start
    """


def _class_sql() -> str:
    """SQL over the signs: the evidence class of one non-passing rollout (`CLASSES`)."""
    return f"""
        CASE
          WHEN category IN ('verifier_error', 'unverified') THEN 'unjudged'
          WHEN stuck THEN 'loop'
          WHEN category = 'harness_error' AND kind IN ({_quoted(AGENT_FAILURES)})
            THEN 'agent_failed'
          WHEN unrecorded THEN 'unrecorded'
          WHEN category IN ({_quoted(_FAILED_CALL)})
               OR (category = 'tool_error' AND kind IN ('tool_error', '{TOOL_SERVER_ERROR}'))
            THEN 'failed_call'
          WHEN echo OR (looped AND placeholder) THEN 'echo'
          WHEN category = 'tools_not_called' THEN 'tools_ignored'
          WHEN category IN ({_quoted(_SERVING)}) THEN 'serving'
          WHEN NOT formless AND (lenient OR extracted_right) THEN 'lenient_right'
          WHEN formless AND (expected_in_text OR lenient) AND cut THEN 'cut_other_form'
          WHEN formless AND (expected_in_text OR lenient) THEN 'other_form'
          WHEN placeholder THEN 'placeholder'
          WHEN cut AND NOT looped
               AND (form_started OR expected_in_text OR bucket = 'sometimes_pass'
                    OR reference_start)
            THEN 'cut_on_way'
          WHEN cut THEN 'cut_astray'
          WHEN looped THEN 'loop'
          ELSE 'wrong'
        END
    """


def prepare_unrecorded(con) -> None:
    """Temp table diag_unrecorded: the rollouts whose agent's model-call record is broken, what
    `failing_inputs_sql` reads."""
    flagged = [CHECKS[name].sql for name in AGENT_RECORD_CHECKS]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE diag_unrecorded AS {unrecorded_sql(flagged, MODEL_FREE)}"
    )


def prepare(con, no_answer: tuple[str, ...]) -> None:
    """Temp table diag_evidence: the rollouts that are evidence in groups of one task, bucket,
    class and kind (`task_id`, `bucket`, `class`, `kind`, `rollouts`, `first`: the group's
    first rollouts), from diagnose's diag_failures, diag_rollouts and diag_tasks
    (`gymflow.analysis.diagnose._prepare`)."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE diag_evidence AS "
        + evidence_sql(_inputs_sql(), _signs_sql(no_answer), _class_sql())
    )


def _run_facts(con) -> tuple[int, dict[str, object], str | None]:
    """(repeats, sampling settings, the `command` harness's agent recipe) as the run was
    configured."""
    stored_repeats, stored_sampling = repeats_and_sampling(con)
    sampling, config = _object(stored_sampling), _object(config_json(con))
    harness = config.get("harness")
    agent = harness.get("agent") if isinstance(harness, dict) else None
    return int(stored_repeats or 0), sampling, agent if isinstance(agent, str) else None


def _object(text: object) -> dict:
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    real = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if real else None


def evidence(con, version: str, no_answer: tuple[str, ...], *, examples: int = 5) -> Evidence:
    """The evidence of diag_evidence (`prepare`), by class and by task pattern, with the run's
    facts the hypotheses read: its repeats and temperature, and the uncut rollouts' answer
    forms (do rollouts the limit did not cut read in the verifier's form?)."""
    counts = ", ".join(
        f"coalesce(sum(rollouts) FILTER (WHERE class = '{name}'), 0)::INTEGER AS \"{name}\""
        for name in CLASSES
    )
    rows = con.execute(
        f"""
        WITH per_task AS (
            SELECT task_id, any_value(bucket) AS bucket, {counts}
            FROM diag_evidence GROUP BY task_id
        )
        SELECT bucket, {", ".join(f'"{name}"' for name in CLASSES)}, count(*)::INTEGER
        FROM per_task GROUP BY ALL ORDER BY ALL
        """
    ).fetchall()
    patterns = [
        EvidencePattern(
            bucket=row[0],
            counts={name: n for name, n in zip(CLASSES, row[1:-1], strict=True) if n},
            tasks=row[-1],
        )
        for row in rows
    ]
    task_ids = con.execute(
        f"""
        SELECT class || '|' || bucket, list(DISTINCT task_id ORDER BY task_id)[1:{TASK_IDS}]
        FROM diag_evidence GROUP BY ALL
        """
    ).fetchall()
    by_class = con.execute(
        f"""
        SELECT class, sum(rollouts)::BIGINT, {merged_first_sql("first", examples)}
        FROM diag_evidence GROUP BY class
        """
    ).fetchall()
    formless, formed = uncut_forms(con)
    tasks_total = con.execute("SELECT count(*) FROM diag_tasks WHERE n > 0").fetchone()[0]
    agent_kinds = con.execute(
        """
        SELECT kind, sum(rollouts)::BIGINT FROM diag_evidence
        WHERE class = 'agent_failed' GROUP BY kind
        """
    ).fetchall()
    repeats, sampling, agent = _run_facts(con)
    limit = _number(sampling.get("max_output_tokens"))
    return Evidence(
        classes=list(CLASSES),
        totals={name: int(count) for name, count, _ in by_class},
        examples={name: list(ids or []) for name, _, ids in by_class},
        patterns=patterns,
        task_ids=dict(task_ids),
        tasks=int(tasks_total),
        uncut_formless=int(formless or 0),
        uncut_formed=int(formed or 0),
        repeats=repeats,
        temperature=_number(sampling.get("temperature")),
        max_output_tokens=int(limit) if limit is not None else None,
        agent_kinds={kind: int(n) for kind, n in agent_kinds},
        agent=agent,
    )
