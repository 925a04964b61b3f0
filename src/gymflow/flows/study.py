"""The `study` flow: a baseline and its variants, run concurrently as evaluation subflows, then
verifier-only variants judged again on the baseline's rollouts, and the study report."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

from gymflow.core.config import EvalConfig
from gymflow.core.errors import RuntimeFailure
from gymflow.flows.eval_run import UnhealthyRun, evaluation_loop
from gymflow.flows.lean import flow
from gymflow.flows.parameters import UNSHARDED, ScaleOptions
from gymflow.present import format_number, format_percent, format_points, markdown_text
from gymflow.reverify.new_version import reverify
from gymflow.store.db import connect, copy_store
from gymflow.store.verifier_versions import current_verifier_version
from gymflow.study.results import ArmRun, StudyResult, study_result
from gymflow.study.spec import StudySpec, resolve_study, store_of

#: Arms collected at once; each holds a thread and its own local policy server while it runs.
MAX_CONCURRENT_ARMS = 8


class StudyFailed(RuntimeFailure):
    """An arm of the study did not finish (the CLI prints it plainly; a retry resumes it)."""


@task(name="run-arm", cache_policy=NO_CACHE, task_run_name="run-arm-{name}")
def run_arm(name: str, config: EvalConfig, scale: ScaleOptions) -> str:
    """One arm as an evaluation subflow: resumable, so a retry runs only its missing rollouts.
    An arm that fails its health gate is still an arm: its subflow run ends Failed, and the
    study's table shows its health."""
    with contextlib.suppress(UnhealthyRun):
        evaluation_loop(config, resume=True, scale=scale)
    return config.out


def _stored_version(run_dir: Path) -> str:
    """The version the arm's run is read under (`store.verifier_versions`)."""
    with connect(run_dir, read_only=True) as con:
        return current_verifier_version(con)


@flow(
    name="study",
    log_prints=True,
    task_runner=ThreadPoolTaskRunner(max_workers=MAX_CONCURRENT_ARMS),
)
def study(spec: StudySpec, scale: ScaleOptions = UNSHARDED) -> dict[str, Any]:
    """Run an ablation study: every arm that needs inference concurrently, then the verifier-only
    variants as reverifies of the baseline, then the paired comparisons and the report.

    Args:
        spec: The baseline config and its variants, each changing one factor.
        scale: How each arm's run is sharded (as for an eval run).
    """
    plan = resolve_study(spec, f"study {spec.name!r}")
    stores = store_of(plan)
    arms = {plan.baseline.name: plan.baseline} | {arm.name: arm for arm in plan.variants}
    inference = {str(stores[name]): arms[name] for name in arms if not arms[name].reverify_only}
    futures = {
        run_dir: run_arm.submit(arm.name, arm.config, scale) for run_dir, arm in inference.items()
    }
    wait(list(futures.values()))
    failed = {
        inference[run_dir].name: future.state.message
        for run_dir, future in futures.items()
        if not future.state.is_completed()
    }
    if failed:
        listed = "; ".join(f"{name}: {why}" for name, why in failed.items())
        raise StudyFailed(f"{len(failed)} arm(s) did not finish ({listed}); retry to resume them")
    base_dir = stores[plan.baseline.name]
    base_version = _stored_version(base_dir)
    runs = {plan.baseline.name: ArmRun(plan.baseline, base_dir, base_version)}
    for arm in plan.variants:
        if arm.reverify_only:
            copy_store(base_dir, stores[arm.name])
            # the copy is the variant's run: it is read under the variant's verifier
            judged = reverify(
                stores[arm.name],
                arm.config.verifier_params,
                base_version=base_version,
                make_current=True,
            )
            runs[arm.name] = ArmRun(arm, stores[arm.name], judged.new_version)
        else:
            runs[arm.name] = ArmRun(arm, stores[arm.name], _stored_version(stores[arm.name]))
    result = study_result(plan, runs[plan.baseline.name], [runs[a.name] for a in plan.variants])
    report = _publish(plan.out, result)
    return {**result.as_dict(), "report": str(report.resolve())}


def _publish(out: Path, result: StudyResult) -> Path:
    from gymflow.reports.history import write_study_report

    report = write_study_report(out / "study.html", result)
    create_link_artifact(
        key="gymflow-study-report", link=report.resolve().as_uri(), description="Study report"
    )
    arms = [result.baseline, *(v.summary for v in result.variants)]
    simulated = ", ".join(arm.name for arm in arms if arm.simulated)
    rows = [
        f"| {markdown_text(v.summary.name)} | {v.summary.isolates or 'confounded'} | "
        f"{format_points(v.difference)} | {format_number(v.p_adjusted)} | "
        f"{len(v.gained)}/{len(v.lost)} | {v.summary.health} |"
        for v in result.variants
    ]
    create_markdown_artifact(
        key="gymflow-study-summary",
        markdown="\n".join(
            [
                f"# Study {result.name}",
                "",
                f"Baseline pass@1 {format_percent(result.baseline.pass1)}; {result.test}.",
                "",
                *(
                    ["**Simulated**: gymflow's simulated policy server answered " + simulated, ""]
                    if simulated
                    else []
                ),
                "| variant | isolates | difference | p (Bonferroni) | gained/lost | health |",
                "|---|---|---|---|---|---|",
                *rows,
            ]
        ),
        description="Study: each variant against the baseline",
    )
    return report
