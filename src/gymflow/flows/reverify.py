"""The `reverify` flow: new rewards from stored rollouts under changed verifier parameters."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from gymflow.flows.lean import flow
from gymflow.reverify.new_version import Reverified
from gymflow.reverify.new_version import reverify as reverify_run

SUMMARY_KEY = "gymflow-reverify"


@task(name="reverify-run", cache_policy=NO_CACHE)
def reverify_task(
    run_dir: str, settings: dict[str, Any], failed_only: bool, force: bool, make_current: bool
) -> Reverified:
    return reverify_run(
        run_dir, settings, failed_only=failed_only, force=force, make_current=make_current
    )


def _summary(result: Reverified) -> str:
    flipped = result.flips.rollouts
    lines = [
        f"# Reverify: {result.environment} · {result.verifier}",
        "",
        f"`{result.base_version}` → **`{result.new_version}`** ({result.status}, "
        f"{result.reverified} rollouts judged; params `{result.params}`)",
        "",
        f"Flipped: {flipped.count} rollouts ({len(flipped.to_pass)} now pass, "
        f"{len(flipped.to_fail)} now fail).",
        "",
        f"The run is read under `{result.current_version}`"
        + (" (made current)." if result.made_current else " (unchanged: not made current)."),
    ]
    for label, head in (("before", result.before), ("after", result.after)):
        if head:
            lines.append(f"- {label}: `{head.as_json()}`")
    return "\n".join(lines)


@flow(name="reverify", log_prints=True)
def reverify(
    run_dir: str,
    settings: dict[str, Any] | None = None,
    failed_only: bool = False,
    force: bool = False,
    make_current: bool = False,
) -> Reverified:
    """Store a new verifier version beside the old one (no inference) and summarise the flips.

    Args:
        run_dir: The run store whose rollouts are judged again.
        settings: Verifier parameters to change, e.g. {"tolerance": 0.01}; none: the
            environment's verifier as it is now.
        failed_only: Judge again only rollouts the base version did not pass.
        force: Reverify even environments that verify live session state.
        make_current: Read the run under the new version from now on (profile, diagnose,
            reports, history, data); otherwise the version read before stays current.
    """
    result = reverify_task(run_dir, settings or {}, failed_only, force, make_current)
    create_markdown_artifact(
        key=SUMMARY_KEY, markdown=_summary(result), description="Reverify: what changed"
    )
    return result
