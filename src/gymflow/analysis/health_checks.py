"""The health checks: each one SQL query over a store, and the tables they share.

A check yields the ids it flags: rollout ids for `rollout` checks, `task_id#repeat` keys for the
`run` check on missing rows, task ids for the `task` check. Parameters reach the SQL as DuckDB
session variables (`getvariable('name')`), so every check stays a plain, copyable query. Four
temporary tables are built once and shared (`SHARED_TABLES`): `tool_items` (the trajectories'
function calls and outputs, unnested), `call_tasks` (per task: its rollouts' calls and warm
answers, and the rollouts a call check may flag with their token totals beside their calls' sums,
last status and sampling, unnested as `rollout_calls`) and `task_repeats` (each task's stored
rollouts beside its distinct expected repeats). `health.health` runs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gymflow.analysis.signs import LOOP_LINES, LOOP_REPEATS, LOOP_WORDS, columns_sql, loop_sql
from gymflow.store.queries.answers import (
    TOOLS_ALPHA,
    TOOLS_CALL_RATE,
    no_answer_sql,
    tools_ignored_sql,
)

Level = Literal["rollout", "run", "task"]
#: `integrity`: the records themselves are incomplete or inconsistent, so the run's numbers
#: cannot be trusted. `warning`: the records are sound but show something a user should look at
#: (failed calls, truncation, malformed tool calls): the policy's behaviour or the setup, already
#: accounted for in coverage and scores. Only integrity checks fail the gate unless a threshold
#: is set for a warning.
Severity = Literal["integrity", "warning"]


@dataclass(frozen=True, slots=True)
class Check:
    description: str
    sql: str
    level: Level = "rollout"
    #: session variables the query reads; when one is unknown the check is skipped, not guessed
    needs: tuple[str, ...] = ()
    severity: Severity = "integrity"
    #: the share of expected rollouts this check may flag by default, when not the severity's
    threshold: float | None = None


_TOOL_ITEMS = """
CREATE OR REPLACE TEMP TABLE tool_items AS
WITH items AS (
    SELECT rollout_id, unnest(json_extract(trajectory_json, '$[*]')) AS item
    FROM rollouts
    WHERE trajectory_json LIKE '%function_call%'
)
SELECT rollout_id,
       item->>'type' AS type,
       item->>'call_id' AS call_id,
       item->>'arguments' AS arguments
FROM items
WHERE item->>'type' IN ('function_call', 'function_call_output')
"""

# Each rollout's token totals beside its calls' sums and last status, whether any call sampled
# above temperature 0 and whether any sent other sampling than the run's config (each distinct
# sampling parsed once, by one multi-path extract: a run's calls send a few settings, and
# parsing every call's cost a fifth of this table), and the answer of a completed rollout
# sampled warm, as a hash (`identical_repeats` compares answers within a task: two different
# answers read alike once in 2^64). Grouped by task in the same pass: what `identical_repeats`
# and `duplicate_identity` read of every rollout (the answers' spread, the calls' count), and
# the few rollouts some call check flags, kept whole (`rollout_calls` unnests them). A table of
# every rollout (10M rows written to be scanned seven times) or of the calls themselves (1.5 GiB
# at 10M rollouts) is never built. A store holds one run (`store.runs.run_info`).
_SAMPLING = (
    "json_extract_string(sampling_json, ['$.temperature', '$.top_p', '$.max_output_tokens'])"
)
_DIFFERS = " OR ".join(
    f"c.{key} IS DISTINCT FROM run.{key}" for key in ("temperature", "top_p", "max_output_tokens")
)
#: A rollout one of the checks reading `rollout_calls` may flag (each check's own test decides).
_CALL_FLAGGED = " OR ".join(
    f"coalesce({test}, FALSE)"
    for test in (
        "m.calls IS NULL",
        "m.calls > 1",
        "m.last_status = 'error'",
        "r.input_tokens IS NULL OR r.output_tokens IS NULL OR m.without_usage > 0",
        "r.input_tokens <> coalesce(m.input_sum, 0)",
        "r.output_tokens <> coalesce(m.output_sum, 0)",
        "m.sampling_differs",
    )
)
_CALL_TASKS = f"""
CREATE OR REPLACE TEMP TABLE call_tasks AS
WITH configured AS (
    SELECT TRUE AS present, TRY_CAST(s[1] AS DOUBLE) AS temperature,
           TRY_CAST(s[2] AS DOUBLE) AS top_p, TRY_CAST(s[3] AS DOUBLE) AS max_output_tokens
    FROM (SELECT {_SAMPLING} AS s FROM runs LIMIT 1)
),
parsed AS (
    SELECT sampling_json, TRY_CAST(s[1] AS DOUBLE) AS temperature,
           TRY_CAST(s[2] AS DOUBLE) AS top_p, TRY_CAST(s[3] AS BIGINT) AS max_output_tokens
    FROM (SELECT sampling_json, {_SAMPLING} AS s
          FROM (SELECT DISTINCT sampling_json FROM model_calls))
),
sent AS (
    SELECT c.rollout_id, c.call_index, c.attempt, c.status, c.input_tokens, c.output_tokens,
           p.temperature, p.top_p, p.max_output_tokens
    FROM model_calls c
    JOIN parsed p ON p.sampling_json IS NOT DISTINCT FROM c.sampling_json
),
rollout_calls AS (
    SELECT r.rollout_id, r.task_id, r.input_tokens, r.output_tokens,
           m.calls, m.input_sum, m.output_sum, m.without_usage, m.last_status, m.warm,
           m.sampling_differs,
           CASE WHEN r.status = 'completed' AND m.warm
                THEN hash(r.output_text, r.output_tokens, r.num_turns) END AS warm_answer,
           {_CALL_FLAGGED} AS flagged
    FROM rollouts r
    LEFT JOIN (
        SELECT rollout_id,
               count(*) AS calls,
               sum(coalesce(input_tokens, 0)) AS input_sum,
               sum(coalesce(output_tokens, 0)) AS output_sum,
               count(*) FILTER (
                   WHERE status <> 'error' AND (input_tokens IS NULL OR output_tokens IS NULL)
               ) AS without_usage,
               arg_max(status, call_index::BIGINT * 1000000 + attempt) AS last_status,
               bool_or(c.temperature > 0) AS warm,
               bool_or(coalesce(run.present, FALSE) AND ({_DIFFERS})) AS sampling_differs
        FROM sent c LEFT JOIN configured run ON TRUE GROUP BY rollout_id
    ) m USING (rollout_id)
)
SELECT task_id,
       count(warm_answer) AS warm_answers,
       min(warm_answer) <> max(warm_answer) AS warm_varied,
       sum(calls) AS calls,
       list({{'rollout_id': rollout_id, 'task_id': task_id, 'input_tokens': input_tokens,
              'output_tokens': output_tokens, 'calls': calls, 'input_sum': input_sum,
              'output_sum': output_sum, 'without_usage': without_usage,
              'last_status': last_status, 'warm': warm, 'sampling_differs': sampling_differs}})
           FILTER (WHERE flagged) AS flagged
FROM rollout_calls GROUP BY task_id
"""
# The rollouts a call check may flag, one row each, as `call_tasks` kept them.
_ROLLOUT_CALLS = """
CREATE OR REPLACE TEMP TABLE rollout_calls AS
SELECT unnest(f) FROM (SELECT unnest(flagged) AS f FROM call_tasks)
"""

# One row per task that has rollouts: how many are stored, and how many of the expected repeats
# (0 to `repeats` - 1) they hold, as the bits set in a bitstring. A task holding every expected
# repeat exactly once (stored = held = repeats) can neither miss one nor hold one twice, so
# `missing_rollout` and `duplicate_identity` look at the other tasks only: at ten million
# rollouts, grouping every (task, repeat) pair cost seconds to find none.
_TASK_REPEATS = """
CREATE OR REPLACE TEMP TABLE task_repeats AS
SELECT task_id, count(*) AS stored,
       coalesce(bit_count(
           bitstring_agg(repeat_index, 0, greatest(getvariable('repeats') - 1, 0))
           FILTER (WHERE repeat_index BETWEEN 0 AND getvariable('repeats') - 1)), 0) AS held
FROM rollouts GROUP BY task_id
"""

_TOOL_PAIRS = """
SELECT rollout_id, call_id,
       count(*) FILTER (WHERE type = 'function_call') AS calls,
       count(*) FILTER (WHERE type = 'function_call_output') AS outputs
FROM tool_items GROUP BY rollout_id, call_id
"""


#: A run in which more than this share of the expected rollouts failed is unhealthy (the
#: `failed_share` check); `--threshold failed_share=SHARE` allows more. The query reads the
#: threshold the gate applies, so the check, the verdict and the gate agree.
FAILED_SHARE_MAX = 0.05

#: A run in which more than this share of the expected rollouts completed without any answer is
#: unhealthy (the `no_answer_share` check): its zeros are the serving setup's, not the policy's.
NO_ANSWER_SHARE_MAX = 0.5

# A verification that errored leaves its rollout unscored as surely as a model failure does: a
# run whose verifier (a judge, a sandbox) failed on most rollouts scores the few it judged.
_FAILED = (
    "status = 'failed' OR rollout_id IN (SELECT rollout_id FROM verifications "
    "WHERE verifier_version = getvariable('verifier_version') AND status <> 'ok')"
)

#: A rollout whose agent uses no model by design (the `command` harness's `oracle` and `nothing`
#: agents, which prove a workspace task solvable and not solved by doing nothing): no model call
#: and no answer text are what it is, not missing evidence.
MODEL_FREE = "coalesce(TRY_CAST(json_extract(counters_json, '$.model_free') AS INTEGER), 0) = 1"
_NO_ANSWER = f"{no_answer_sql()} AND NOT {MODEL_FREE}"
#: A rollout a tool's server failed in, the model reading the failed call's answer and going
#: on (a NeMo Gym tool route's 500): this check's name, and diagnose's kind of `tool_error`.
TOOL_SERVER_ERROR = "tool_server_error"
#: Tool calls whose server failed and whose answer the model read (`harness.tool_loop`).
TOOL_SERVER_ERRORS = (
    "coalesce(TRY_CAST(json_extract(counters_json, '$.tool_server_errors') AS INTEGER), 0)"
)

# Read once per distinct output: a run's outputs repeat (a task's repeats give a few answers),
# and the words and lines a loop is read in are most of health's work on the outputs. Only the
# few looping texts are looked up again.
_LOOPS = f"""
WITH looping AS (
    SELECT output FROM (
        SELECT output, {columns_sql("output")}
        FROM (SELECT DISTINCT output_text AS output FROM rollouts)
    )
    WHERE {loop_sql()}
)
SELECT rollout_id AS id FROM rollouts WHERE output_text IN (SELECT output FROM looping)
"""


# An external agent's trajectory is its own account of the run (an in-process harness builds
# its trajectory from the calls' answers, so it is checked only under `command`): each
# assistant text in it must be text some recorded call of the rollout answered.
_TEXT_WITHOUT_CALL = """
WITH items AS (
    SELECT rollout_id, unnest(json_extract(trajectory_json, '$[*]')) AS item
    FROM rollouts WHERE (SELECT max(harness) FROM runs) = 'command'
),
said AS (
    SELECT rollout_id,
           CASE WHEN json_type(item->'content') = 'VARCHAR' THEN item->>'content'
                ELSE array_to_string(json_extract_string(item, '$.content[*].text'), '') END
               AS text
    FROM items WHERE item->>'type' = 'message' AND item->>'role' = 'assistant'
),
produced AS (
    SELECT rollout_id,
           string_agg(array_to_string(
               json_extract_string(response_json, '$.output[*].content[*].text'), ''), '\x1f')
               AS text
    FROM model_calls
    WHERE rollout_id IN (SELECT rollout_id FROM said) AND json_valid(response_json)
    GROUP BY rollout_id
)
SELECT DISTINCT s.rollout_id AS id FROM said s LEFT JOIN produced p USING (rollout_id)
WHERE s.text <> '' AND NOT contains(coalesce(p.text, ''), s.text)
"""


# An external agent's own count of its model calls (its log, `counters.agent_logged_calls`)
# against the requests the recording proxy recorded for the rollout.
_CALLS_UNRECORDED = """
WITH logged AS (
    SELECT rollout_id,
           TRY_CAST(json_extract(counters_json, '$.agent_logged_calls') AS BIGINT) AS n
    FROM rollouts WHERE counters_json LIKE '%agent_logged_calls%'
),
recorded AS (
    SELECT rollout_id, count(DISTINCT call_index) AS n FROM model_calls
    WHERE rollout_id IN (SELECT rollout_id FROM logged) GROUP BY rollout_id
)
SELECT l.rollout_id AS id FROM logged l LEFT JOIN recorded r USING (rollout_id)
WHERE l.n IS DISTINCT FROM coalesce(r.n, 0)
"""


def _beyond_share(where: str, variable: str) -> str:
    """The rollouts matching `where`, when they are more than the share held in `variable` of
    the expected (or stored, if more) rollouts; none otherwise."""
    return f"""
        SELECT rollout_id AS id FROM rollouts
        WHERE ({where})
          AND (SELECT count(*) FROM rollouts WHERE {where})
              > getvariable('{variable}')::DOUBLE * greatest(
                  (SELECT count(*) FROM tasks) * coalesce((SELECT max(repeats) FROM runs), 0),
                  (SELECT count(*) FROM rollouts))
        """


#: The checks of an external agent's model-call record (the `command` harness's evidence): a
#: rollout they flag was lost by the harness's record, whatever its verdict says of the model.
#: The decision reads them as harness evidence (`gymflow.analysis.evidence`).
AGENT_RECORD_CHECKS = (
    "proxy_refused_calls",
    "calls_after_deadline",
    "agent_calls_unrecorded",
    "text_without_call",
    "agent_log_refused",
)

#: The temporary table of rollout ids whose seal did not match (`health._seal_mismatches`).
SEAL_MISMATCHES = "seal_mismatches"

CHECKS: dict[str, Check] = {
    "missing_rollout": Check(
        "expected (task_id, repeat_index) with no stored rollout",
        """
        WITH short AS (
            SELECT t.task_id FROM tasks t LEFT JOIN task_repeats k USING (task_id)
            WHERE coalesce(k.held, 0) < getvariable('repeats')
        )
        SELECT s.task_id || '#' || gs.r AS id
        FROM short s
        CROSS JOIN range(getvariable('repeats')) gs(r)
        ANTI JOIN (
            SELECT task_id, repeat_index FROM rollouts
            WHERE task_id IN (SELECT task_id FROM short)
        ) ro ON ro.task_id = s.task_id AND ro.repeat_index = gs.r
        """,
        level="run",
    ),
    "duplicate_identity": Check(
        "rollouts sharing one (task_id, repeat_index), or model calls sharing one "
        "(rollout_id, call_index, attempt)",
        """
        WITH crowded AS (SELECT task_id FROM task_repeats WHERE stored > held)
        SELECT rollout_id AS id FROM rollouts
        WHERE task_id IN (SELECT task_id FROM crowded)
          AND (task_id, repeat_index) IN (
            SELECT (task_id, repeat_index) FROM rollouts
            WHERE task_id IN (SELECT task_id FROM crowded)
            GROUP BY task_id, repeat_index HAVING count(*) > 1)
        UNION
        SELECT rollout_id FROM model_calls
        WHERE rollout_id IN (SELECT rollout_id FROM rollout_calls WHERE calls > 1)
           -- calls of no stored rollout are not in rollout_calls: then every call is looked at
           OR (SELECT count(*) FROM model_calls)
              <> (SELECT coalesce(sum(calls), 0) FROM call_tasks)
        GROUP BY rollout_id, call_index, attempt HAVING count(*) > 1
        """,
    ),
    # By run and task: a sealed rollout copied in from another run of this machine (its seal
    # binds its run_id) in place of a failing one read healthy when matched by task_id alone.
    "unknown_task": Check(
        "rollout whose (run_id, task_id) is not among the run's tasks (a task of no task "
        "list, or a rollout of another run)",
        "SELECT r.rollout_id AS id FROM rollouts r ANTI JOIN tasks t USING (run_id, task_id)",
    ),
    "no_model_calls": Check(
        "rollout with no recorded model call (an agent that never called the model too; not one "
        "that uses none by design, the `oracle` and `nothing` agents)",
        "SELECT rollout_id AS id FROM rollout_calls WHERE calls IS NULL "
        f"AND rollout_id NOT IN (SELECT rollout_id FROM rollouts WHERE {MODEL_FREE})",
    ),
    "last_call_failed": Check(
        "the rollout's last model call (last turn, last attempt) failed",
        "SELECT rollout_id AS id FROM rollout_calls WHERE last_status = 'error'",
        severity="warning",
    ),
    "empty_output": Check(
        "completed rollout with no answer: its final output text is empty and it made no "
        "function call (a function call is an answer)",
        f"SELECT rollout_id AS id FROM rollouts WHERE {_NO_ANSWER}",
        severity="warning",
    ),
    "incomplete_response": Check(
        "the response ended incomplete (output-token limit)",
        "SELECT rollout_id AS id FROM rollouts WHERE incomplete",
        severity="warning",
    ),
    "zero_output_tokens": Check(
        "completed rollout reporting zero output tokens",
        f"""
        SELECT rollout_id AS id FROM rollouts
        WHERE status = 'completed' AND coalesce(output_tokens, 0) = 0 AND NOT {MODEL_FREE}
        """,
        severity="warning",
    ),
    # Missing usage leaves token figures unknown, not scores wrong (many NeMo Gym files record
    # none): a warning. Counts that disagree with each other mean the records are inconsistent.
    "token_counts_missing": Check(
        "token counts missing: the model server (or the imported file) reported no usage for a "
        "call, so token and cost figures leave it out",
        """
        SELECT rollout_id AS id FROM rollout_calls
        WHERE input_tokens IS NULL OR output_tokens IS NULL OR coalesce(without_usage, 0) > 0
        """,
        severity="warning",
    ),
    "token_mismatch": Check(
        "the rollout's token totals differ from the sum over its model calls",
        """
        SELECT rollout_id AS id FROM rollout_calls
        WHERE coalesce(without_usage, 0) = 0
          AND (input_tokens <> coalesce(input_sum, 0) OR output_tokens <> coalesce(output_sum, 0))
        """,
    ),
    # The recording proxy's refusals (`harness/proxy.py`): an agent spending calls it was not
    # given, or calling on after its time. The agent's conduct, already in its outcome.
    "proxy_refused_calls": Check(
        "the recording proxy refused a call of the agent (no proxy key, or not a request)",
        "SELECT DISTINCT rollout_id AS id FROM model_calls WHERE failure_kind = 'proxy_refused'",
        severity="warning",
    ),
    "calls_after_deadline": Check(
        "the agent called the model after the rollout's deadline (refused by the proxy)",
        "SELECT DISTINCT rollout_id AS id FROM model_calls WHERE failure_kind = 'after_deadline'",
        severity="warning",
    ),
    "agent_calls_unrecorded": Check(
        "an external agent's own log counts a different number of model calls than the "
        "recording proxy recorded for the rollout",
        _CALLS_UNRECORDED,
    ),
    # A log the agent left as a link (`-> /dev/zero`, `-> a host file`), a device or past the
    # bound: left in its sandbox by `Sandbox.download`, so the agent's own account is missing.
    "agent_log_refused": Check(
        "an external agent's logs held a link, a device or a file past the bound, left in its "
        "sandbox unread: its own account of the run is missing (the rollout's error names them)",
        "SELECT rollout_id AS id FROM rollouts WHERE counters_json LIKE '%agent_logs_refused%' "
        "AND TRY_CAST(json_extract(counters_json, '$.agent_logs_refused') AS BIGINT) > 0",
    ),
    "text_without_call": Check(
        "an external agent's trajectory holds assistant text that no recorded model call of the "
        "rollout produced",
        _TEXT_WITHOUT_CALL,
    ),
    "function_call_without_output": Check(
        "a function_call in the trajectory with no function_call_output for its call_id "
        "(under a harness that executes calls: single_turn's calls are the answer, verified "
        "and never executed, as in BFCL)",
        f"""
        SELECT DISTINCT rollout_id AS id FROM ({_TOOL_PAIRS}) WHERE calls > 0 AND outputs = 0
        AND NOT EXISTS (SELECT 1 FROM runs WHERE harness = 'single_turn')
        """,
    ),
    "output_without_function_call": Check(
        "a function_call_output whose call_id no function_call in the trajectory made",
        f"SELECT DISTINCT rollout_id AS id FROM ({_TOOL_PAIRS}) WHERE outputs > 0 AND calls = 0",
    ),
    "invalid_tool_arguments": Check(
        "a function_call whose arguments are not valid JSON",
        """
        SELECT DISTINCT rollout_id AS id FROM tool_items
        WHERE type = 'function_call' AND NOT coalesce(json_valid(arguments), FALSE)
        """,
        severity="warning",
    ),
    # The model read the failed tool's answer and went on, as NeMo Gym's agent goes on, so the
    # verdict stands as NeMo Gym's; what the run measured there is partly the tool's server.
    TOOL_SERVER_ERROR: Check(
        "a tool's server failed on a call (a NeMo Gym tool route answering 500): its answer went "
        "back to the model as the tool's output and the rollout went on, as NeMo Gym's agent "
        "goes on; the rollout's error holds the route, the status and the server's log",
        f"SELECT rollout_id AS id FROM rollouts WHERE {TOOL_SERVER_ERRORS} > 0",
        severity="warning",
    ),
    # Not the token limit (`incomplete_response` says that): a loop, whether the limit cut it
    # or the model stopped on its own. A rambling answer cut at the limit is not one.
    "runaway_generation": Check(
        f"the output runs in a loop: its last {LOOP_WORDS} words occur {LOOP_REPEATS} or more "
        f"times in it, or one line makes up half its lines and occurs {LOOP_LINES} or more "
        "times (degenerate repetition)",
        _LOOPS,
        severity="warning",
    ),
    "tools_never_called": Check(
        "offered tools and called none, in a run whose calls are fewer than a policy calling on "
        f"{TOOLS_CALL_RATE:.0%} of its rollouts would make with probability {TOOLS_ALPHA:.0%} "
        "(a binomial test: 0 calls in 7 rollouts is flagged): the model server ignores the "
        "tools (a function-calling handler that drops them, a chat template without tools, a "
        "tool_choice it needs and was not sent)",
        f"SELECT rollout_id AS id FROM ({tools_ignored_sql()})",
        severity="warning",
    ),
    "sampling_mismatch": Check(
        "a model call sent temperature, top_p or max_output_tokens other than the run's config",
        "SELECT rollout_id AS id FROM rollout_calls WHERE sampling_differs",
    ),
    # Run-wide on purpose: a confident policy repeats a short answer at any temperature, but
    # when no task's repeats differ at all, sampling had no effect: a gateway dropping the seed
    # or the temperature, or a cache answering. pass@k then cannot rise above pass@1.
    "identical_repeats": Check(
        "every task's repeats came back identical at temperature above 0: the server ignored "
        "sampling (a dropped seed or temperature, a cache)",
        """
        WITH per_task AS (
            SELECT task_id, warm_varied AS varied FROM call_tasks WHERE warm_answers > 1
        )
        SELECT task_id AS id FROM per_task
        WHERE NOT EXISTS (SELECT 1 FROM per_task WHERE varied)
        """,
        level="task",
        severity="warning",
    ),
    "reward_out_of_range": Check(
        "a reward (any verifier version) outside the environment's reward range",
        """
        SELECT DISTINCT rollout_id AS id FROM verifications
        WHERE status = 'ok' AND (
            reward IS NULL OR isnan(reward)
            OR reward < getvariable('reward_low')::DOUBLE
            OR reward > getvariable('reward_high')::DOUBLE)
        """,
        needs=("reward_low", "reward_high"),
    ),
    # Scores count `passed`; the threshold decides it from the reward when it is stored
    # (environments/resources.py `judged`). A verdict that disagrees was written by something
    # else: `UPDATE verifications SET passed = true` took pass@1 from 59% to 100%, healthy.
    "verdict_disagrees": Check(
        "a stored verdict (any verifier version) that is not its reward judged by the "
        "environment's pass threshold: passed true below it, false at or above it, or missing "
        "(an edit setting reward and passed together is found by judging the rollouts again: "
        "`gym eval reverify RUN --check`)",
        """
        SELECT DISTINCT rollout_id AS id FROM verifications
        WHERE status = 'ok' AND (
            passed IS NULL OR reward IS NULL
            OR passed <> (reward >= getvariable('pass_threshold')::DOUBLE))
        """,
        needs=("pass_threshold",),
    ),
    "verification_missing": Check(
        "completed rollout with no verification under the verifier version read",
        """
        SELECT r.rollout_id AS id FROM rollouts r
        ANTI JOIN (
            SELECT rollout_id FROM verifications
            WHERE verifier_version = getvariable('verifier_version')
        ) v USING (rollout_id)
        WHERE r.status = 'completed'
        """,
        needs=("verifier_version",),
    ),
    "verification_error": Check(
        "the verifier could not judge the rollout (verifier error, judge failure)",
        """
        SELECT rollout_id AS id FROM verifications
        WHERE verifier_version = getvariable('verifier_version') AND status <> 'ok'
        """,
        needs=("verifier_version",),
        severity="warning",
    ),
    "failed_share": Check(
        "failed rollouts (model, transport, harness, tool failures, and completed rollouts the "
        f"verifier could not judge), when more than the threshold (by default "
        f"{FAILED_SHARE_MAX:.0%}) of the expected rollouts failed: the run mostly measured its "
        "setup, not the policy",
        _beyond_share(_FAILED, "failed_share_max"),
        needs=("failed_share_max", "verifier_version"),
        threshold=FAILED_SHARE_MAX,
    ),
    "no_answer_share": Check(
        "completed rollouts that gave no answer (empty final text, no function call), when more "
        f"than the threshold (by default {NO_ANSWER_SHARE_MAX:.0%}) of the expected rollouts: "
        "scored 0, they measure the serving limits (an output-token limit spent on reasoning), "
        "not the policy",
        _beyond_share(_NO_ANSWER, "no_answer_share_max"),
        needs=("no_answer_share_max",),
        threshold=NO_ANSWER_SHARE_MAX,
    ),
    # Every check above reads the store as written; one who can write it can make them all
    # agree (an output rewritten to the reference, its verdict set to pass). The seal cannot be
    # made without the key (store/seal.py): recomputed for every verdict outside DuckDB
    # (`check_seals`), the mismatches left in a temporary table.
    "seal_mismatch": Check(
        "a verdict (any verifier version) whose seal is not the one its fields and its "
        "rollout's stored final text and trajectory give under this machine's seal key: the "
        "verdict or the rollout it judged was edited in the store, or a verdict was written "
        "there without the key",
        f"SELECT id FROM {SEAL_MISMATCHES}",
        needs=("seal_checked",),
    ),
    "task_list_edited": Check(
        "the store's task list is not the one its writers sealed: a task (with its rollouts) "
        "deleted or added in the file, which no verdict's seal can show, or an older store's "
        "seal record put in place of its own",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('task_list_sealed')",
        level="run",
        needs=("task_list_sealed",),
    ),
    "inputs_edited": Check(
        "what decides the run's numbers besides its verdicts (the tasks' prompts, references "
        "and data, the run's row, the verifier versions with their parameters, which version "
        "is current, which of an import's rollouts it stored without a verdict, the model "
        "server's report of itself) is not what "
        "its writers sealed: edited in the file (an answer key, a lenient version made "
        "current, a verdict deleted from an import)",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('inputs_sealed')",
        level="run",
        needs=("inputs_sealed",),
    ),
    "rollouts_edited": Check(
        "the store's rollouts (each one's run, task, repeat, status, failure kind, cut at the "
        "limit, turns, calls, tokens, counters, error and timings, whatever its verdict) are not "
        "those its writers "
        "sealed: a rollout edited, added or deleted in the file (a failing rollout's verdict "
        "deleted and the rollout set to failed leaves every score)",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('rollouts_sealed')",
        level="run",
        needs=("rollouts_sealed",),
    ),
    "calls_edited": Check(
        "the store's model calls (each one's rollout, index, attempt, status, failure kind, HTTP "
        "status, latency, token counts with the cached and reasoning ones, sampling, request, "
        "response and error) are not those its writers sealed: a call edited, added or deleted "
        "in the file (what the call checks, the decision's agent-record checks and the "
        "simulated-model flag read)",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('calls_sealed')",
        level="run",
        needs=("calls_sealed",),
    ),
    "verdicts_edited": Check(
        "the store's verdicts are not the set its writers sealed (their count and the XOR of "
        "their seals, under the key): a verdict deleted, added, or moved into "
        "superseded_verifications in the file, which no verdict's own seal can show (failing "
        "verdicts gone leave every score); in a store sealed before the set was, a completed "
        "rollout whose verdict is gone without a reverify having set it aside",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('verdicts_sealed')",
        level="run",
        needs=("verdicts_sealed",),
    ),
    "seal_rolled_back": Check(
        "the store is an older sealed state of itself put back at its path: its generation "
        "(raised by every writer that seals, sealed with its seal records) is below the one "
        "this machine's writers took the store at this path to (recorded beside the seal key), "
        "or its generation record is not the one sealed over its seal records (a newer state's "
        "record copied into an older one): every seal of that older state matches, so only the "
        "generation shows it; or another store put at its path (its store id is not the one "
        "recorded there: `store/store_ids.py`)",
        "SELECT run_id AS id FROM runs WHERE NOT getvariable('generation_ok')",
        level="run",
        needs=("generation_ok",),
    ),
    "seal_stripped": Check(
        "a verdict of a store this machine sealed at this path (its sealed-stores ledger, beside "
        "the seal key) that now reads as unsealed or sealed by another key: its seals or seal "
        "record were removed or rewritten in the file, which an older or a colleague's store "
        "would only warn of",
        "SELECT rollout_id AS id FROM verifications WHERE getvariable('seal_state') = 'stripped'",
        needs=("seal_state",),
    ),
    "verdict_unsealed": Check(
        "a verdict without a seal, written before gymflow sealed its verdicts: edits of it or "
        "of its rollout cannot be seen (a store this gymflow writes has none)",
        """
        SELECT rollout_id AS id FROM verifications
        WHERE getvariable('seal_state') = 'unsealed' OR (
            getvariable('seal_state') = 'sealed' AND seal IS NULL
            AND (SELECT count(*) FROM verifications WHERE seal IS NULL)
                <= getvariable('seal_legacy')::BIGINT)
        """,
        needs=("seal_state",),
        severity="warning",
    ),
    "seal_key_unknown": Check(
        "a verdict sealed with a key this machine does not hold (set GYMFLOW_SEAL_KEY to the "
        "key that sealed the run): its seal cannot be checked, so edits cannot be seen; no "
        "sign of tampering by itself",
        "SELECT rollout_id AS id FROM verifications WHERE getvariable('seal_state') = 'foreign'",
        needs=("seal_state",),
        severity="warning",
    ),
    "tampering": Check(
        "the answer's code was seen touching the verification harness (failure kind "
        "tampering: it ended the tests early, patched or inspected the runner, forged a reply)",
        """
        SELECT rollout_id AS id FROM verifications
        WHERE verifier_version = getvariable('verifier_version') AND failure_kind = 'tampering'
        """,
        needs=("verifier_version",),
        severity="warning",
    ),
}

#: Derived from the rollout checks above, so it runs after them.
TASK_CHECK = "task_unhealthy_every_repeat"
TASK_CHECK_DESCRIPTION = "task whose every stored rollout failed at least one rollout check"
TASK_SQL = """
SELECT r.task_id AS id
FROM rollouts r LEFT JOIN (SELECT DISTINCT id FROM health_hits) u ON u.id = r.rollout_id
GROUP BY r.task_id HAVING count(*) = count(u.id)
"""


#: The temporary tables the checks read, by name, each built by its statement in this order.
SHARED_TABLES = {
    "tool_items": _TOOL_ITEMS,
    "call_tasks": _CALL_TASKS,
    "rollout_calls": _ROLLOUT_CALLS,
    "task_repeats": _TASK_REPEATS,
}
