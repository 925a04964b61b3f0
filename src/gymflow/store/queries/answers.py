"""What counts as an answer, as SQL the health checks and the diagnosis share.

- A rollout answered when its final text is not empty or it made a function call: a function
  call is an answer (BFCL's single-turn answers are calls and nothing else).
- Extracted answers, as verifiers report them in `details.extracted`, compare after
  normalisation: case, whitespace, thousands separators, currency signs and a trailing period do
  not make two answers different.
- The expected answer "appears elsewhere" in a response the verifier found no answer in when it
  occurs in the text as a whole token: the evidence that a reading in another form would change
  the verdict (a prompt problem), where its absence means the answer was not there to find.
- Tools were ignored when a run offered tools on its model calls and (nearly) none of its
  rollouts called one (at most TOOLS_CALLED_MAX_SHARE), fewer than a policy that uses them
  could make by chance: a binomial test of the calls made against a policy calling on
  TOOLS_CALL_RATE of its rollouts, at error rate TOOLS_ALPHA (0 calls in 7 rollouts is flagged,
  0 in 6 is not: 0.5^7 < 1% < 0.5^6). A server whose function-calling handler drops the tools,
  not a policy; the test's size, not a count of rollouts, sets how small a run can show it."""

from __future__ import annotations

from statistics import NormalDist

#: A trajectory that holds a function call (or its output: a call was made).
CALLED_SQL = "coalesce({trajectory}, '') LIKE '%\"function_call%'"

#: Tools ignored: at most this share of the rollouts offered tools called one...
TOOLS_CALLED_MAX_SHARE = 0.02
#: ...fewer calls than a policy calling on this share of its rollouts makes...
TOOLS_CALL_RATE = 0.5
#: ...with this probability at most (the test's error rate on such a policy).
TOOLS_ALPHA = 0.01
#: Past this many rollouts offered tools, the binomial is read by its normal approximation.
_EXACT_UP_TO = 1000


def called_sql(trajectory: str = "trajectory_json") -> str:
    """SQL: the trajectory column `trajectory` holds a function call."""
    return CALLED_SQL.format(trajectory=trajectory)


def no_answer_sql(rollouts: str = "") -> str:
    """SQL over a rollouts row (alias `rollouts`, or none): completed with no answer at all,
    neither final text nor a function call."""
    prefix = f"{rollouts}." if rollouts else ""
    return (
        f"{prefix}status = 'completed' AND coalesce(trim({prefix}output_text), '') = '' "
        f"AND NOT ({called_sql(prefix + 'trajectory_json')})"
    )


def extracted_sql(details_column: str) -> str:
    """SQL for the extracted answer a verification's details hold (NULL when none)."""
    return f"json_extract_string({details_column}, '$.extracted')"


def normalised_sql(expression: str) -> str:
    """SQL normalising an answer string: lower case, no whitespace, commas, '$' or final '.'."""
    squeezed = f"regexp_replace(trim({expression}), '[\\s,$]+', '', 'g')"
    return f"regexp_replace(lower({squeezed}), '\\.$', '')"


def appears_in_sql(expected: str, text: str) -> str:
    """SQL: the expected answer `expected` occurs in `text` as a whole token (not inside a
    longer number or word), case and thousands separators aside; an integral number however it
    was stored (42.0 is looked for as 42). NULL or empty `expected`: false."""
    number = f"TRY_CAST({expected} AS DOUBLE)"
    integral = f"{number} = floor({number}) AND abs({number}) < 1e15"
    wanted = (
        f"lower(trim(CASE WHEN {integral} THEN CAST(CAST({number} AS BIGINT) AS VARCHAR) "
        f"ELSE {expected} END))"
    )
    haystack = f"lower(regexp_replace(coalesce({text}, ''), '(\\d),(\\d{{3}})', '\\1\\2', 'g'))"
    # \Q...\E: the answer is matched literally (an answer holding `\E` is not looked for)
    pattern = f"'(^|[^a-z0-9])\\Q' || {wanted} || '\\E($|[^a-z0-9])'"
    # A pattern made per row is compiled per row: only where the answer occurs at all (a
    # substring test, a hundredth of the cost) is it asked whether it occurs as a token.
    return (
        f"coalesce(CASE WHEN {wanted} <> '' AND NOT contains({wanted}, '\\E') "
        f"AND contains({haystack}, {wanted}) THEN regexp_matches({haystack}, {pattern}) END, "
        "FALSE)"
    )


def binomial_low_sql(k: str, n: str, p: float, alpha: float) -> str:
    """SQL: P(X <= k) <= alpha for X ~ Binomial(n, p): summed exactly up to _EXACT_UP_TO trials,
    by the normal approximation (with continuity correction) past it."""
    term = (
        f"exp(lgamma({n} + 1) - lgamma(i + 1) - lgamma({n} - i + 1) "
        f"+ i * ln({p}) + ({n} - i) * ln({1 - p}))"
    )
    exact = f"list_sum(list_transform(range(0, {k} + 1), lambda i: {term})) <= {alpha}"
    z = f"({k} + 0.5 - {n} * {p}) / sqrt({n} * {p} * {1 - p})"
    normal = f"{z} <= {NormalDist().inv_cdf(alpha)!r}"
    return f"CASE WHEN {n} <= {_EXACT_UP_TO} THEN {exact} ELSE {normal} END"


def tools_ignored_sql() -> str:
    """SQL: ids (`rollout_id`) of the completed rollouts that were offered tools and called
    none, in a run where at most TOOLS_CALLED_MAX_SHARE of them called one, fewer than a policy
    calling on TOOLS_CALL_RATE of its rollouts makes with probability TOOLS_ALPHA (the module's
    test); none otherwise. The tools
    are read off the requests as stored: a reference to a stored tool list, or a list written
    inline."""
    return f"""
        WITH offered AS (
            SELECT DISTINCT rollout_id FROM model_calls
            WHERE request_json LIKE '%"tools":"@tool_list:%'
               OR request_json LIKE '%"tools":[{{%'
        ),
        marked AS (
            SELECT o.rollout_id, {called_sql("r.trajectory_json")} AS called, r.status
            FROM offered o JOIN rollouts r USING (rollout_id)
        ),
        tally AS (
            SELECT count(*) AS n, count(*) FILTER (WHERE called) AS k FROM marked
        )
        SELECT rollout_id FROM marked
        WHERE NOT called AND status = 'completed'
          AND (SELECT k <= n * {TOOLS_CALLED_MAX_SHARE}
                      AND {binomial_low_sql("k", "n", TOOLS_CALL_RATE, TOOLS_ALPHA)}
               FROM tally)
    """
