"""Assembling a report's data: every section a plain dict, computed from one open store.

The statistics come from gymflow.analysis; this module only picks, orders and bounds what the
page shows (how many trajectories are inlined, which go to the JSONL export)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from gymflow.analysis.profile import profile
from gymflow.analysis.results import Profile, RunAnalysis
from gymflow.analysis.run import analyse
from gymflow.core.json_text import parse
from gymflow.data.profile import data_profile
from gymflow.reports.trajectory import blocks
from gymflow.reverify.new_version import flips
from gymflow.store.queries import report_views as views
from gymflow.store.runs import RunInfo, run_info
from gymflow.store.stored_values import named_bad_values
from gymflow.store.verifier_versions import current_verifier_version


def details(details_json: str | None) -> dict[str, Any]:
    """A verdict's stored details as a dict: unreadable JSON and a bare value are kept, named."""
    try:
        value: object = parse(details_json) if details_json else {}
    except json.JSONDecodeError:
        return {"unreadable": details_json}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep a report small whatever the run's size."""

    inline_examples: int = 12  # sometimes-pass tasks shown with two trajectories each
    exported_examples: int = 2000  # further sometimes-pass tasks written to the JSONL export
    evidence_examples: int = 5  # example rollouts behind the recommended action
    task_table_rows: int = 2000
    grid_cells: int = 20_000  # beyond this many rollouts the grid draws shares per task
    changed_tasks: int = 200  # reverify / compare task rows shown
    near_duplicate_groups: int = 10  # training-data section: near-duplicate prompt groups shown

    @property
    def diagnosed_tasks(self) -> int:
        """Sometimes-pass tasks the diagnosis lists: those inlined and those exported."""
        return self.inline_examples + self.exported_examples


DEFAULT_LIMITS = Limits()


def report_analysis(
    con, *, verifier_version: str | None = None, limits: Limits = DEFAULT_LIMITS
) -> RunAnalysis:
    """The analysis a report renders, when no flow computed it: trajectories are read from the
    store, so the diagnosis carries no output excerpts."""
    return analyse(con, verifier_version=verifier_version, top=limits.diagnosed_tasks, excerpt=0)


def example(rollout: dict[str, Any] | None) -> dict[str, Any] | None:
    """One rollout as the report shows it: verdict, verifier details and trajectory blocks."""
    if rollout is None:
        return None
    shown, left_out = blocks(rollout["trajectory_json"])
    return {
        **{k: v for k, v in rollout.items() if k not in ("trajectory_json", "details_json")},
        "details": details(rollout["details_json"]),
        "blocks": shown,
        "items_left_out": left_out,
    }


def exported(rollout: dict[str, Any]) -> dict[str, Any]:
    """One rollout as a JSONL line: the whole stored trajectory, nothing clipped."""
    row = {k: v for k, v in rollout.items() if k not in ("trajectory_json", "details_json")}
    row["details"] = details(rollout["details_json"])
    try:
        row["trajectory"] = parse(rollout["trajectory_json"] or "[]")
    except json.JSONDecodeError:
        row["trajectory"] = {"unreadable": rollout["trajectory_json"]}
    return row


def run_config(run: RunInfo) -> dict[str, Any]:
    config = json.loads(run.config_json or "{}")
    sampling = json.loads(run.sampling_json or "{}")
    return {
        "run": run,
        "config": config,
        "config_pretty": json.dumps(config, indent=2, sort_keys=True),
        "sampling": sampling,
    }


def _category(category: str, kind: str | None) -> str:
    return category if not kind or kind == category else f"{category}: {kind}"


@named_bad_values
def run_sections(con, analysis: RunAnalysis, *, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Everything a single-run report shows, from the run's analysis (computed once, by the flow
    or `report_analysis`) and the trajectories in its store. `export` holds the rollouts beyond
    the inline limit, for the JSONL file beside the report."""
    prof, diagnosis, decision = analysis.profile, analysis.diagnosis, analysis.decision
    version = prof.verifier_version
    rows = views.outcome_rows(con, version)
    varying = diagnosis.sometimes_pass
    shown, rest = varying[: limits.inline_examples], varying[limits.inline_examples :]
    # When the run comes first (missing rollouts, failing health), the evidence's own pick is
    # the runner-up: its example rollouts are still the ones to read.
    basis = decision.evidence or decision.runner_up
    evidence_ids = basis.examples[: limits.evidence_examples] if basis else []
    wanted = [side.rollout_id for r in varying for side in (r.passing, r.failing) if side]
    rollouts = views.rollouts_by_id(con, wanted + evidence_ids, version)
    versions = views.verifier_versions(con)
    taxonomy = diagnosis.taxonomy
    return {
        "verifier_version": version,
        "current_verifier_version": current_verifier_version(con),
        "profile": prof,
        "health": analysis.health,
        "run": run_config(run_info(con)),
        "decision": decision,
        "evidence": [example(rollouts.get(rid)) for rid in evidence_ids if rid in rollouts],
        "evidence_for": basis.label if basis else None,
        "buckets": diagnosis.buckets,
        "suspects": diagnosis.verifier_suspects,
        "grid": {
            "rows": rows[: limits.task_table_rows],
            # The picture sorts tasks by pass rate, so the buckets show as bands.
            "cells": [
                (r.task_id, r.codes)
                for r in sorted(rows, key=lambda r: -1.0 if r.rate is None else -r.rate)
            ],
            "repeats": prof.repeats,
            "tasks": len(rows),
            "per_repeat": len(rows) * prof.repeats <= limits.grid_cells,
        },
        "taxonomy": {
            "bars": [(_category(t.category, t.kind), t.rollouts) for t in taxonomy],
            "total": diagnosis.non_passing_rollouts,
        },
        "sometimes": {
            "count": diagnosis.buckets["sometimes_pass"].tasks,
            "examples": [
                {
                    **item.as_json(),
                    "passing": example(rollouts.get(item.passing.rollout_id))
                    if item.passing
                    else None,
                    "failing": example(rollouts.get(item.failing.rollout_id))
                    if item.failing
                    else None,
                }
                for item in shown
            ],
            "exported_tasks": len(rest),
        },
        "export": [
            exported(rollouts[side.rollout_id])
            for item in rest
            for side in (item.passing, item.failing)
            if side and side.rollout_id in rollouts
        ],
        "distributions": {
            column: {
                "label": label,
                "unit": unit,
                "bins": views.histogram(con, column),
                "usage": prof.usage.get(column),
            }
            for column, (label, unit) in views.DISTRIBUTIONS.items()
        },
        "reverify": _reverify(con, versions, prof, limits),
        "training_data": data_profile(
            con, verifier_version=version, groups_shown=limits.near_duplicate_groups
        ),
        "passk_band": [prof.pass_at_k_bootstrap_ci95.get(k) for k in prof.pass_at_k],
    }


def _reverify(
    con, versions: list[dict[str, Any]], shown: Profile, limits: Limits
) -> dict[str, Any] | None:
    """With more than one verifier version, what changed between the shown version and the one
    before it (the newest against its predecessor by default; the oldest against the next)."""
    if len(versions) < 2:
        return None
    names = [v["verifier_version"] for v in versions]
    index = max(names.index(shown.verifier_version), 1)
    previous, later = names[index - 1], names[index]
    flipped = flips(con, previous, later).rollouts
    tasks = views.reward_changes(con, previous, later)
    # the shown version's profile is the analysis's: only the other versions are profiled here
    headline = {
        name: shown if name == shown.verifier_version else profile(con, verifier_version=name)
        for name in names
    }
    return {
        "versions": [{**v, "profile": headline[v["verifier_version"]]} for v in versions],
        "old": previous,
        "new": later,
        "to_pass": flipped.to_pass,
        "to_fail": flipped.to_fail,
        "tasks": tasks[: limits.changed_tasks],
        "changed_tasks": len(tasks),
        "rewards_changed": sum(t["reward_changed"] for t in tasks),
    }
