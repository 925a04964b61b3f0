"""A run's analysis in one call: health, profile, diagnosis, and the decision made from them."""

from __future__ import annotations

from gymflow.analysis.decide import decide
from gymflow.analysis.diagnose import diagnose
from gymflow.analysis.environment import lenient_params
from gymflow.analysis.health import Gate, health
from gymflow.analysis.outcomes import check_verifier_version
from gymflow.analysis.profile import profile
from gymflow.analysis.results import RunAnalysis
from gymflow.store.checked_stores import check_seals_once
from gymflow.store.db import memory_capped_call
from gymflow.store.runs import run_info

#: The seal check as health ran it: under the analyses' memory cap, bad values named.
_check_seals = memory_capped_call(check_seals_once)


def analyse(
    con,
    *,
    verifier_version: str | None = None,
    gate: Gate | None = None,
    top: int = 20,
    excerpt: int = 2000,
) -> RunAnalysis:
    """Every result of the run in `con` under one verifier version (the newest unless given),
    each computed once; `top` and `excerpt` bound the diagnosis's sometimes-pass tasks."""
    version = check_verifier_version(con, verifier_version)
    # One seal check for the analysis: the profile reports what health's check found. A second
    # check, even the shortcut once health recorded the store as checked, read the file's
    # digest, the seal record and the inputs' seal again.
    seals = _check_seals(con)
    run_health = health(con, verifier_version=version, gate=gate, seals=seals)
    run_profile = profile(con, verifier_version=version, seals=seals)
    diagnosis = diagnose(con, verifier_version=version, top=top, excerpt=excerpt)
    return RunAnalysis(
        health=run_health,
        profile=run_profile,
        diagnosis=diagnosis,
        decision=decide(
            run_health,
            run_profile,
            diagnosis,
            verifier_lenient=lenient_params(con, version),
            template=run_info(con).prompt_template,
        ),
    )
