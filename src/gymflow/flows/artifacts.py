"""What an evaluation flow run shows in the Prefect UI: a link to the HTML report, a table of the
headline metrics, a markdown summary that answers "how did it do" on its own, and progress.

Each artifact has a key, and a flow run holds at most one artifact per key: a retry of the run
updates the artifacts its first attempt made, so a "Shards failed" summary or a stopped progress
bar never stays beside the new results. Keys are lowercase letters, digits and dashes, or the
Artifacts page does not list them."""

from __future__ import annotations

from uuid import UUID

from prefect import artifacts
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import ArtifactUpdate
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
)
from prefect.runtime import flow_run

from gymflow.analysis.results import Decision, Health, Profile, RunAnalysis
from gymflow.present import (
    coverage_text,
    format_counts,
    format_interval,
    format_percent,
    markdown_text,
)
from gymflow.present import headline_text as headline
from gymflow.reports.serving import ReportLink, report_link

REPORT_KEY = "gymflow-report"
HEADLINE_KEY = "gymflow-headline"
SUMMARY_KEY = "gymflow-summary"
PROGRESS_KEY = "gymflow-progress"


#: The artifacts this process published, by (flow run, key): published again, updated in place.
_published: dict[tuple[str, str], UUID] = {}


def _earlier_attempts(client, run_id: str | None, keys: list[str]) -> dict[str, UUID]:
    """By key, the newest artifact an earlier attempt of this flow run published (a retry: the
    UI's Retry button, a crashed run run again). A first attempt has none: no query."""
    if run_id is None or (flow_run.run_count or 1) <= 1:
        return {}
    found = client.read_artifacts(
        artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=keys), flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])
        )
    )
    return {a.key: a.id for a in sorted(found, key=lambda a: a.created)}


def publish(*items: artifacts.Artifact) -> list[UUID]:
    """Create each artifact, or update in place the one this flow run already has under its key
    (published earlier in this attempt, or by an earlier one a retry re-publishes). Only a
    retry asks the API server which it has: that query was a third of publishing the results."""
    run_id = flow_run.id
    with get_client(sync_client=True) as client:
        earlier = _earlier_attempts(client, run_id, [item.key for item in items])
        ids = []
        for item in items:
            existing = _published.get((run_id, item.key)) or earlier.get(item.key)
            if existing is None:
                existing = item.create(_sync=True).id
            else:
                client.update_artifact(
                    existing,
                    ArtifactUpdate(data=item.format(_sync=True), description=item.description),
                )
            if run_id is not None:
                _published[(run_id, item.key)] = existing
            ids.append(existing)
        return ids


def _health_text(health: Health) -> str:
    failing = health.failing_checks
    return health.verdict + (f" (failing: {', '.join(failing)})" if failing else "")


def pass_at_k_rows(profile: Profile) -> list[dict[str, str]]:
    """One row per k: pass@k with its CI (task-clustered for k = 1, bootstrap above) and pass^k."""
    rows = []
    for k, value in profile.pass_at_k.items():
        ci = profile.ci95 if k == "1" else profile.pass_at_k_bootstrap_ci95.get(k)
        rows.append(
            {
                "k": k,
                "pass@k": format_percent(value),
                "95% CI": format_interval(ci),
                "pass^k": format_percent(profile.pass_hat_k.get(k)),
            }
        )
    return rows


def headline_rows(profile: Profile, health: Health) -> list[dict[str, str]]:
    """The headline as a table: each figure once, rounded, with its interval where it has one."""
    rows = [
        {"metric": f"pass@{row['k']}", "value": row["pass@k"], "95% CI": row["95% CI"]}
        for row in pass_at_k_rows(profile)
    ]
    rows += [
        {"metric": f"pass^{k}", "value": format_percent(v), "95% CI": ""}
        for k, v in profile.pass_hat_k.items()
        if k != "1"  # pass^1 is pass@1
    ]
    rows += [
        {"metric": "coverage", "value": coverage_text(profile.coverage), "95% CI": ""},
        {"metric": "health", "value": _health_text(health), "95% CI": ""},
        {"metric": "verifier version", "value": profile.verifier_version, "95% CI": ""},
        {"metric": "policy", "value": "simulated" if profile.simulated else "model", "95% CI": ""},
    ]
    return rows


def action_text(decision: Decision) -> str:
    """The decision (`gymflow.analysis.decide.decide`) as one markdown line."""
    if decision.action is None:
        return f"Nothing to fix: {decision.why}."
    return f"**{decision.label}**: {decision.why}."


def _evidence_lines(decision: Decision) -> list[str]:
    lines = []
    evidence = decision.evidence
    if evidence:
        categories = format_counts(dict(sorted(evidence.categories.items(), key=lambda kv: -kv[1])))
        lines += [
            "",
            f"Evidence: {evidence.rollouts} rollouts ({format_percent(evidence.share, 0)} of the "
            f"failing evidence){f': {categories}' if categories else ''}.",
        ]
        if evidence.examples:
            lines.append("Example rollouts: " + ", ".join(f"`{e}`" for e in evidence.examples))
    runner_up = decision.runner_up
    if runner_up:
        lines += [
            "",
            f"Runner-up: {runner_up.label} ({format_percent(runner_up.share, 0)} of the evidence).",
        ]
    return lines


def _report_lines(link: ReportLink) -> list[str]:
    if link.url:
        return [f"**Report: [{link.url}]({link.url})**"]
    return [f"Report (a file): `{link.path}`", "", f"_{link.note}_"]


def summary_markdown(analysis: RunAnalysis, link: ReportLink) -> str:
    profile, health = analysis.profile, analysis.health
    name = markdown_text(profile.benchmark or profile.environment)
    table = [
        "| k | pass@k | 95% CI | pass^k |",
        "|---|---|---|---|",
        *(
            f"| {r['k']} | {r['pass@k']} | {r['95% CI']} | {r['pass^k']} |"
            for r in pass_at_k_rows(profile)
        ),
    ]
    return "\n".join(
        [
            f"# {name} · {markdown_text(profile.model)} · run `{profile.run_id}`",
            "",
            *(
                [
                    "**Simulated**: gymflow's simulated policy server answered this run, not a "
                    "real model.",
                    "",
                ]
                if profile.simulated
                else []
            ),
            f"**{headline(profile)}**, clustered on {profile.tasks_scored} tasks × "
            f"{profile.repeats} repeats",
            "",
            f"- Coverage: {coverage_text(profile.coverage)}; failures {profile.failures}.",
            f"- Health: **{_health_text(health)}**",
            f"- Verifier version: `{profile.verifier_version}`",
            "",
            "## Recommended next action",
            "",
            action_text(analysis.decision),
            *_evidence_lines(analysis.decision),
            "",
            "## pass@k",
            "",
            *table,
            "",
            *_report_lines(link),
        ]
    )


def publish_results(analysis: RunAnalysis, report_path: str) -> ReportLink:
    """Publish the report link, the headline table and the summary; returns where the report is."""
    link = report_link(report_path)
    if link.url:
        report: artifacts.Artifact = artifacts.LinkArtifact(
            key=REPORT_KEY,
            link=link.url,
            link_text="gymflow HTML report",
            description="The run's decision report",
        )
    else:
        report = artifacts.MarkdownArtifact(
            key=REPORT_KEY,
            markdown=f"`{link.path}`\n\n{link.note}",
            description="The run's decision report (a file; no reports server configured)",
        )
    publish(
        report,
        artifacts.TableArtifact(
            key=HEADLINE_KEY,
            table=headline_rows(analysis.profile, analysis.health),
            description="Headline metrics",
        ),
        artifacts.MarkdownArtifact(
            key=SUMMARY_KEY,
            markdown=summary_markdown(analysis, link),
            description="How did it do: headline, coverage, health, next action, pass@k",
        ),
    )
    return link


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
    publish(
        artifacts.MarkdownArtifact(
            key=SUMMARY_KEY,
            markdown="\n".join(lines),
            description="Shards failed; how to resume",
        )
    )


def publish_retrying(attempt: int) -> None:
    """A retry replaces what the summary said of the attempt before (shards failed, a gate
    failed) at once: while it runs, the summary says it is running, not how the last one
    ended."""
    publish(
        artifacts.MarkdownArtifact(
            key=SUMMARY_KEY,
            markdown="\n".join(
                [
                    f"# Attempt {attempt} running",
                    "",
                    "This retry continues the run: what its store holds is kept, and only the "
                    "missing rollouts (and shards) run. The results replace this summary when it "
                    "ends; see the progress artifact meanwhile.",
                ]
            ),
            description=f"Attempt {attempt} running",
        )
    )
