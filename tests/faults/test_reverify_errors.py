"""Verifications that errored or timed out are judged again by `gym eval reverify` under the same
version (before, it answered "already stored"), with the errored verdicts kept as evidence; and
`gym eval reverify RUN` without `--set` judges with the environment's verifier as it is now: the
stored version when nothing changed, a new one when its code or its parameters did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gymflow.cli import exit_codes
from gymflow.core.config import EvalConfig
from gymflow.rollouts.collect import run_collect
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.store.db import connect
from tests.conftest import gym
from tests.faults.stores import query

ENVS = Path(__file__).parent / "envs"


def _reverify(run: Path, envs: Path, **env: str) -> dict:
    # the faultlab checker reads its variables in a verifier worker: passed to it by name
    names = {"GYMFLOW_CHILD_ENV": ",".join(env)} if env else {}
    out = gym("eval", "reverify", str(run), "--json", cwd=run.parent,
              env={"GYMFLOW_ENVIRONMENTS_PATH": str(envs), **env, **names})  # fmt: skip
    assert out.returncode == exit_codes.OK, out.stderr
    return json.loads(out.stdout)


# every errored verdict waits out its verifier's timeout, three reverifies over (61 s on a
# loaded machine); tests/analysis/test_reverify.py keeps reverify in the fast tier
@pytest.mark.slow
def test_reverify_rejudges_errors_and_follows_the_verifier_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
    plan = resolve(EvalConfig(environment="faultlab", repeats=1, out=str(tmp_path / "run")))
    with connect(plan.run_dir, create=True) as con:
        register_run(con, plan, resume=False)
    from gymflow.simulated.endpoint import local_policy_server

    with local_policy_server(plan) as server, connect(plan.run_dir) as con:
        run_collect(plan, plan.keys(), con, base_url=server.base_url)
    store = plan.run_dir / "gymflow.duckdb"
    version = plan.verifier_version
    errored = dict(
        query(
            store,
            "SELECT failure_kind, count(*) FROM verifications WHERE status = 'error' GROUP BY ALL",
        )
    )
    assert errored.get("verifier_error", 0) > 0 and errored.get("verifier_timeout", 0) > 0

    # The checker's crash is fixed (the hang is not): same parameters, same version, and the
    # errored verdicts are judged again instead of "already stored".
    fixed = _reverify(plan.run_dir, ENVS, FAULTLAB_FIXED="1")
    assert fixed["new_version"] == version and fixed["status"] == "rejudged"
    assert fixed["reverified"] == sum(errored.values())
    now = dict(
        query(
            store,
            "SELECT coalesce(failure_kind, 'ok'), count(*) FROM verifications GROUP BY ALL",
        )
    )
    assert "verifier_error" not in now and now["verifier_timeout"] == errored["verifier_timeout"]
    assert query(
        store,
        "SELECT failure_kind, rollout_attempt, count(*) FROM superseded_verifications "
        "GROUP BY ALL ORDER BY 1",
    ) == [(kind, 1, n) for kind, n in sorted(errored.items())]
    assert query(store, "SELECT count(*) FROM verifier_versions") == [(1,)]

    # The verifier's code changed (its parameters did not): a new version, named for the code.
    changed = tmp_path / "envs"
    shutil.copytree(ENVS / "faultlab", changed / "faultlab")
    source = changed / "faultlab" / "env.py"
    source.write_text(source.read_text() + "\n# the checker, reviewed\n")
    recoded = _reverify(plan.run_dir, changed, FAULTLAB_FIXED="1")
    assert recoded["status"] == "written"
    assert recoded["new_version"].startswith(f"{version}+")
    assert (
        recoded["reverified"]
        == query(store, "SELECT count(*) FROM rollouts WHERE status = 'completed'")[0][0]
    )
    again = _reverify(plan.run_dir, changed, FAULTLAB_FIXED="1")
    assert again["new_version"] == recoded["new_version"]
    assert again["status"] in ("rejudged", "already stored")  # only its timeouts again

    # The environment's verifier now runs with other parameters: a new version, judged whole.
    manifest = changed / "faultlab" / "environment.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "verifier: {name: faultlab_answer}",
            "verifier: {name: faultlab_answer, params: {tolerance: 1}}",
        )
    )
    moved = _reverify(plan.run_dir, changed, FAULTLAB_FIXED="1")
    assert moved["status"] == "written" and moved["new_version"] != version
    assert "+" not in moved["new_version"] and moved["params"] == {"tolerance": 1}
    assert query(store, "SELECT count(*) FROM verifier_versions") == [(3,)]
