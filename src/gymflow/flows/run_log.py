"""gymflow's own lines in a flow run's log (the Prefect UI's Logs tab): progress, failures by
kind, the headline and where the report is. Prefect's run logger, so they land on the run."""

from __future__ import annotations

from prefect import get_run_logger

from gymflow.analysis.results import RunAnalysis, TaxonomyRow
from gymflow.flows.artifacts import action_text
from gymflow.present import coverage_text, headline_text, safe_text
from gymflow.reports.serving import ReportLink
from gymflow.rollouts.outcomes import BatchOutcome, ShardOutcome


def batch_done(done: int, total: int, batch: BatchOutcome) -> None:
    get_run_logger().info(
        "batch %d of %d done: %d rollouts run (%d completed, %d failed), %d already stored",
        done,
        total,
        batch.attempted,
        batch.completed,
        batch.failed,
        batch.skipped,
    )


def shard_done(index: int, count: int, shard: ShardOutcome) -> None:
    logger = get_run_logger()
    if not shard.ran:
        logger.info(
            "shard %d of %d skipped: its store already holds all %s rollouts",
            index,
            count,
            shard.progress.expected,
        )
        return
    logger.info(
        "shard %d of %d %s: %s of %s rollouts stored",
        index,
        count,
        "done" if shard.progress.complete else "stopped",
        shard.progress.stored,
        shard.progress.expected,
    )


def shard_failed(index: int, count: int, message: str) -> None:
    get_run_logger().error("shard %d of %d failed: %s", index, count, message)


def _kind(row: TaxonomyRow) -> str:
    detail = f" ({row.kind})" if row.kind and row.kind != row.category else ""
    return f"{row.category}{detail} {row.rollouts}"


def results(analysis: RunAnalysis, link: ReportLink) -> None:
    logger = get_run_logger()
    profile = analysis.profile
    logger.info(
        "%s · %s: %s; coverage: %s; health: %s",
        # the console handler prints a flow run's log to the terminal as well: escaped
        safe_text(profile.benchmark or profile.environment),
        safe_text(profile.model),
        headline_text(profile),
        coverage_text(profile.coverage),
        analysis.health.verdict,
    )
    kinds = ", ".join(_kind(row) for row in analysis.diagnosis.taxonomy)
    if kinds:
        logger.info("non-passing rollouts by kind: %s", kinds)
    logger.info("next action: %s", action_text(analysis.decision).replace("**", ""))
    # info, not a warning: a CLI run (whose console shows warnings) prints its own report path
    logger.info("report: %s", link.url or f"{link.path} ({link.note})")
