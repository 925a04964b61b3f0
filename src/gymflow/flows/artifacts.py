"""What an evaluation flow run shows in the Prefect UI: a link to the HTML report, a table of the
headline metrics, a markdown summary with the recommended next action, and progress.

Artifact keys are lowercase letters, digits and dashes, or the Artifacts page does not list them."""

from __future__ import annotations

from typing import Any

from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

REPORT_KEY = "gymflow-report"
HEADLINE_KEY = "gymflow-headline"
SUMMARY_KEY = "gymflow-summary"
PROGRESS_KEY = "gymflow-progress"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


class ProgressArtifact:
    """A progress artifact over `total` units (shards, or batches of an unsharded run)."""

    def __init__(self, total: int, unit: str) -> None:
        self.total, self.unit = max(total, 1), unit
        self.artifact_id = create_progress_artifact(
            progress=0.0, key=PROGRESS_KEY, description=f"0 of {total} {unit} finished"
        )

    def update(self, done: int, failed: int = 0) -> None:
        note = f", {failed} failed" if failed else ""
        update_progress_artifact(
            self.artifact_id,
            progress=100.0 * (done + failed) / self.total,
            description=f"{done} of {self.total} {self.unit} finished{note}",
        )


def headline_rows(profile: dict[str, Any], health: dict[str, Any]) -> list[dict[str, Any]]:
    lo, hi = profile["ci95"] or (None, None)
    return [
        {"metric": "pass@1", "value": profile["pass@1"]},
        {"metric": "ci95_low", "value": lo},
        {"metric": "ci95_high", "value": hi},
        *({"metric": f"pass@{k}", "value": v} for k, v in profile["pass@k"].items()),
        *({"metric": f"pass^{k}", "value": v} for k, v in profile["pass^k"].items()),
        *({"metric": f"coverage_{k}", "value": v} for k, v in profile["coverage"].items()),
        {"metric": "health", "value": health["verdict"]},
    ]


def next_action(profile: dict[str, Any], health: dict[str, Any], decision: dict[str, Any]) -> str:
    """Coverage and health come first (scores of an incomplete or unhealthy run mislead); then
    the diagnosis's decision (`gymflow.analysis.decide`)."""
    coverage = profile["coverage"]
    if coverage["missing"]:
        return (
            f"Complete the run: {coverage['missing']} rollouts are missing. Retry this flow run "
            "(only missing shards and rollouts run again) before reading the scores."
        )
    if health["verdict"] != "healthy":
        checks = ", ".join(c for c in health["failing_checks"] if c not in health["warnings"])
        return f"Fix the records before trusting the scores: health checks failing: {checks}."
    if decision["action"] is None:
        return f"Nothing to fix: {decision['why']}."
    return f"**{decision['label']}**: {decision['why']}"


def summary_markdown(
    profile: dict[str, Any], health: dict[str, Any], report_path: str, action: str
) -> str:
    lo, hi = profile["ci95"] or (None, None)
    coverage = profile["coverage"]
    name = profile["benchmark"] or profile["environment"]
    return "\n".join(
        [
            f"# {name} · {profile['model']} · run `{profile['run_id']}`",
            "",
            f"**pass@1 = {_pct(profile['pass@1'])}** (95% CI {_pct(lo)} – {_pct(hi)})",
            "",
            f"Coverage: expected {coverage['expected']}, scored {coverage['scored']}, failed "
            f"{coverage['failed']}, missing {coverage['missing']}.",
            f"Health: **{health['verdict']}**"
            + (
                f" (failing: {', '.join(health['failing_checks'])})"
                if health["failing_checks"]
                else ""
            ),
            "",
            "## Recommended next action",
            "",
            action,
            "",
            f"Report: `{report_path}`",
        ]
    )


def publish_results(
    profile: dict[str, Any], health: dict[str, Any], report_path: str, action: str
) -> None:
    create_link_artifact(
        key=REPORT_KEY,
        link=f"file://{report_path}",
        link_text="gymflow HTML report",
        description="The run's decision report (a file on the machine that ran the flow)",
    )
    create_table_artifact(
        key=HEADLINE_KEY, table=headline_rows(profile, health), description="Headline metrics"
    )
    create_markdown_artifact(
        key=SUMMARY_KEY,
        markdown=summary_markdown(profile, health, report_path, action),
        description="Summary and recommended next action",
    )


def publish_shard_failure(failures: dict[int, str], stored: int, expected: int) -> None:
    lines = [
        "# Shards failed",
        "",
        *(f"- shard {index}: {message}" for index, message in sorted(failures.items())),
        "",
        f"In the run store so far: {stored} of {expected} rollouts.",
        "",
        "## Recommended next action",
        "",
        "Fix the cause above, then retry this flow run (the Retry button): shards whose stores "
        "are complete are skipped, and inside the others only missing rollouts run.",
    ]
    create_markdown_artifact(
        key=SUMMARY_KEY, markdown="\n".join(lines), description="Shards failed; how to resume"
    )
