"""Prefect tasks for the pure stages, cached on the store's content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from gymflow.analysis.diagnose import diagnose
from gymflow.analysis.health import health
from gymflow.analysis.profile import profile
from gymflow.reports.render import write_run_report
from gymflow.store.db import connect
from gymflow.store.runs import store_fingerprint


def _store_key(context, parameters: dict[str, Any]) -> str:
    with connect(parameters["run_dir"], read_only=True) as con:
        fingerprint = store_fingerprint(con)
    return f"{context.task.name}|{Path(parameters['run_dir']).resolve()}|{fingerprint}"


@task(name="check-health", cache_key_fn=_store_key)
def check_health(run_dir: str) -> dict[str, Any]:
    with connect(run_dir, read_only=True) as con:
        return health(con)


@task(name="profile-run", cache_key_fn=_store_key)
def profile_run(run_dir: str) -> dict[str, Any]:
    with connect(run_dir, read_only=True) as con:
        return profile(con)


@task(name="render-report", cache_policy=NO_CACHE)
def render_report(run_dir: str) -> str:
    return str(write_run_report(Path(run_dir)).resolve())


@task(name="diagnose-run", cache_key_fn=_store_key)
def diagnose_run(run_dir: str) -> dict[str, Any]:
    with connect(run_dir, read_only=True) as con:
        return diagnose(con)
