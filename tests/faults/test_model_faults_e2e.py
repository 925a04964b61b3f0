"""`gym eval run` against a model server injecting every fault kind at fixed rates: the run
completes, transient faults are retried, the rest are stored with their failure kinds, and the
profile's coverage accounts for every rollout (expected = scored + failed + missing)."""

from __future__ import annotations

import re

import pytest

from gymflow.cli import exit_codes
from tests.faults.stores import query, run_gym

ROLLOUTS = 25 * 4
CONFIG = """\
benchmark: arithmetic-smoke
limit: 25
repeats: 4
concurrency: 16
model:
  timeout_s: 1.0
  max_retries: 3
  backoff_s: 0.0
  faults:
    rate_timeout: 0.04
    rate_429: 0.06
    rate_500: 0.06
    rate_malformed: 0.06
    rate_truncated: 0.06
    rate_context_length: 0.04
    rate_refused: 0.04
    rate_reset: 0.06
out: {out}
"""
TRANSIENT = ("rate_limited", "server_error", "timeout", "malformed_response", "transport_error")
FINAL = ("context_length_exceeded", "refused")


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory, prefect_api: str):
    tmp = tmp_path_factory.mktemp("model-faults")
    config = tmp / "faults.yaml"
    config.write_text(CONFIG.format(out=tmp / "run"))
    result = run_gym("eval", "run", str(config), cwd=tmp, prefect_api=prefect_api, timeout=600)
    # It completes; the faults that are not retried (context length, refusal) fail more than
    # 5% of the rollouts, so its health gate fails: exit 2, never "healthy".
    assert result.returncode == exit_codes.GATE_FAILED, result.stdout + result.stderr
    assert "health: unhealthy" in result.stdout
    return result, tmp / "run" / "gymflow.duckdb"


def test_every_fault_kind_is_recorded_as_itself(faulty_run) -> None:
    _, store = faulty_run
    kinds = {k for (k,) in query(store, "SELECT DISTINCT failure_kind FROM model_calls")}
    assert {*TRANSIENT, *FINAL} <= kinds
    incomplete = query(
        store,
        """SELECT count(*) FROM rollouts r JOIN model_calls c USING (rollout_id)
           WHERE c.status = 'incomplete' AND r.incomplete""",
    )[0][0]
    assert incomplete > 0


def test_transient_faults_are_retried_and_final_ones_are_not(faulty_run) -> None:
    _, store = faulty_run
    # Per model call: its failure kinds in attempt order and whether its last attempt succeeded.
    calls = query(
        store,
        """
        SELECT rollout_id, call_index,
               list(failure_kind ORDER BY attempt), list(attempt ORDER BY attempt),
               arg_max(status, attempt)
        FROM model_calls GROUP BY rollout_id, call_index
        """,
    )
    recovered = set()
    for _, _, failures, attempts, last_status in calls:
        assert attempts == list(range(len(attempts))), "attempts are numbered without gaps"
        for kind in failures[:-1]:
            assert kind in TRANSIENT, f"{kind} must not be retried"
        if last_status != "error":
            recovered.update(failures[:-1])
    assert set(TRANSIENT) <= recovered, (
        f"some transient kind was never retried to success: {recovered}"
    )


def test_failed_rollouts_keep_their_kind_and_are_not_scored(faulty_run) -> None:
    _, store = faulty_run
    failed = query(
        store,
        """
        SELECT r.failure_kind, r.error,
               (SELECT arg_max(c.failure_kind, c.attempt) FROM model_calls c
                 WHERE c.rollout_id = r.rollout_id),
               (SELECT count(*) FROM verifications v WHERE v.rollout_id = r.rollout_id)
        FROM rollouts r WHERE r.status = 'failed'
        """,
    )
    assert failed, "with these rates some rollouts must fail"
    assert {kind for kind, *_ in failed} & set(FINAL)
    for kind, error, last_call_kind, verifications in failed:
        assert kind == last_call_kind and error
        assert verifications == 0, "a failed rollout is never scored (no reward 0)"


def test_coverage_accounts_for_every_rollout(faulty_run) -> None:
    result, store = faulty_run
    found = re.search(
        r"coverage: expected (\d+), scored (\d+), failed (\d+), missing (\d+)", result.stdout
    )
    assert found, result.stdout
    expected, scored, failed, missing = map(int, found.groups())
    stored_failed, scored_in_store = query(
        store,
        """
        SELECT count(*) FILTER (WHERE r.status <> 'completed' OR v.status <> 'ok'),
               count(*) FILTER (WHERE r.status = 'completed' AND v.status = 'ok')
        FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
        """,
    )[0]
    assert (expected, missing) == (ROLLOUTS, 0)
    assert (scored, failed) == (scored_in_store, stored_failed)
    assert scored + failed + missing == expected
