"""Check `gym export --format nemo-gym` against NeMo Gym's own code, and `gym import nemo-gym`
against every rollout file NeMo Gym ships.

Two interpreters: gymflow's (this one) makes a run and exports it; a Python 3.12 venv with
`nemo-gym==0.4.0` (NeMo Gym needs 3.12) validates every exported line with NeMo Gym's typed
models (`BaseVerifyResponse` for rollouts: its request model forbids unknown fields; the
request and `NeMoGymResponse` for failures and materialized inputs) and runs its reward
profiler (`RewardProfiler.profile_from_data`, no Ray) on the rollouts with their materialized
inputs, and the aggregation `gym eval aggregate` asks each agent server for (grouped by
`agent_ref`, computed by `compute_aggregate_metrics`, without the HTTP hop). Then the export is
imported back and every count and reward compared.

    ~/.pyenv/versions/3.12*/bin/python -m venv /tmp/nemo-gym-venv
    /tmp/nemo-gym-venv/bin/pip install nemo-gym==0.4.0
    python bench/nemo_gym_contract.py [--venv DIR]   # default: $GYMFLOW_NEMO_GYM_VENV or that

`--tiny` (tests/bench/test_tiny.py) runs 40 tasks and imports 2 of the shipped files: the
shipped files' imports were 22 of its 38 CPU seconds, and tests/interop/test_real_files.py
imports the wheel's files one by one.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tiny

#: Runs inside NeMo Gym's venv: validate, then profile. Prints one JSON object.
CHECK = r"""
import json, sys
from pathlib import Path
from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.config_types import AggregateMetricsRequest
from nemo_gym.reward_profile import RewardProfiler, compute_aggregate_metrics

def load(path):
    p = Path(path)
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []

rollouts, failures, inputs = (load(p) for p in sys.argv[1:4])
errors = []
for name, rows, model in (("rollouts", rollouts, BaseVerifyResponse),
                          ("failures", failures, BaseVerifyRequest)):
    for i, row in enumerate(rows, 1):
        try:
            model.model_validate(row)
        except Exception as exc:
            errors.append(f"{name}:{i}: {str(exc)[:300]}")
for i, row in enumerate(inputs, 1):
    try:
        NeMoGymResponseCreateParamsNonStreaming.model_validate(row["responses_create_params"])
        assert row["agent_ref"]["name"]
    except Exception as exc:
        errors.append(f"materialized_inputs:{i}: {str(exc)[:300]}")
groups, agents = RewardProfiler().profile_from_data(inputs, rollouts, allow_partial_rollouts=True)
# `gym eval aggregate`'s grouping (rows without agent_ref are skipped) and stripping, then what an
# agent server's default /aggregate_metrics computes; only the HTTP hop is left out
by_agent = {}
for row in rollouts:
    name = (row.get("agent_ref") or {}).get("name")
    if name:
        entry = {k: v for k, v in row.items() if k not in ("response", "responses_create_params")}
        entry["response"] = {"usage": (row.get("response") or {}).get("usage")}
        by_agent.setdefault(name, []).append(entry)
aggregated = {
    name: compute_aggregate_metrics(AggregateMetricsRequest(verify_responses=rows).verify_responses)
    for name, rows in by_agent.items()
}
print(json.dumps({
    "aggregate": {
        name: {
            "key_metrics": agg.key_metrics,
            "tasks": len(agg.group_level_metrics),
            "metrics": sorted({k.split("/", 1)[1] for k in agg.agent_metrics if "/" in k}),
        }
        for name, agg in aggregated.items()
    },
    "validated": {"rollouts": len(rollouts), "failures": len(failures), "inputs": len(inputs)},
    "errors": errors[:20], "error_count": len(errors),
    "profiled_tasks": len(groups),
    "agents": [{k: a[k] for k in ("agent_ref", "mean/reward") if k in a} for a in agents],
}))
"""


def default_nemo_gym_path() -> None:
    """`GYMFLOW_NEMO_GYM_PATH`, when unset, is the site-packages of `GYMFLOW_NEMO_GYM_VENV`:
    the servers NeMo Gym's wheel ships."""
    venv = os.environ.get("GYMFLOW_NEMO_GYM_VENV")
    if venv and not os.environ.get("GYMFLOW_NEMO_GYM_PATH"):
        found = sorted(Path(venv).glob("lib/python3*/site-packages"))
        if found:
            os.environ["GYMFLOW_NEMO_GYM_PATH"] = str(found[-1])


def _gym(*args: str, cwd: Path, allowed: tuple[int, ...] = (0,)) -> str:
    # a loaded machine can take longer than Prefect's default 20 s to start its ephemeral API
    env = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", **os.environ}
    done = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", *args], cwd=cwd, capture_output=True, text=True,
        env=env,
    )  # fmt: skip
    if done.returncode not in allowed:
        raise SystemExit(f"gym {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _run_verifier_version(run: Path) -> str:
    """The version the run verified with: read from its store, not `gym eval profile --json`
    (a process of a second's CPU for one field)."""
    import duckdb

    with duckdb.connect(str(run / "gymflow.duckdb"), read_only=True) as con:
        return con.execute("SELECT verifier_version FROM runs").fetchone()[0]


def _store_counts(run: Path, version: str) -> dict:
    import duckdb

    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    try:
        return dict(
            zip(
                ("tasks", "rollouts", "failed", "scored", "reward_sum"),
                con.execute(
                    """
                    SELECT (SELECT count(*) FROM tasks), count(*),
                           count(*) FILTER (WHERE r.status = 'failed'), count(v.reward),
                           round(sum(v.reward), 9)
                    FROM rollouts r LEFT JOIN verifications v
                      ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
                    """,
                    [version],
                ).fetchone(),
                strict=True,
            )
        )
    finally:
        con.close()


def _import_shipped_files(venv: Path, work: Path, at_most: int) -> dict:
    """`gym import nemo-gym`'s function on the rollout files NeMo Gym ships (the first
    `at_most` in path order; 0: every one)."""
    from gymflow.interop.nemo_gym import InteropError, import_rollouts

    site = next(venv.glob("lib/python3*/site-packages"))
    files = sorted(
        Path(p)
        for p in glob.glob(str(site / "**" / "*rollouts*.jsonl"), recursive=True)
        if not any(s in p for s in ("materialized", "_failures", "profiling"))
    )
    files = files[:at_most] if at_most else files
    refused = {}
    for i, path in enumerate(files):
        try:
            import_rollouts(path, work / f"shipped-{i}")
        except InteropError as exc:
            refused[str(path.relative_to(site))] = str(exc).splitlines()[-1].strip()[-120:]
    return {"files": len(files), "imported": len(files) - len(refused), "refused": refused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_venv = os.environ.get("GYMFLOW_NEMO_GYM_VENV", "/tmp/nemo-gym-venv")
    parser.add_argument("--venv", type=Path, default=Path(default_venv))
    parser.add_argument("--benchmark", default="backoffice")
    parser.add_argument("--limit", type=int, default=0, help="the first N tasks (0: all)")
    parser.add_argument(
        "--shipped", type=int, default=0, help="import the first N shipped files (0: all)"
    )
    args = tiny.parse(parser, limit=40, shipped=2)
    python = args.venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python}: no NeMo Gym venv (see this script's docstring)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # refusals and context-length failures, so the failures sidecar is exercised too
        (work / "eval.yaml").write_text(
            f"benchmark: {args.benchmark}\nrepeats: 2\nout: run\n"
            + (f"limit: {args.limit}\n" if args.limit else "")
            + "model: {kind: local, faults: {rate_refused: 0.03, rate_context_length: 0.02}}\n"
        )
        # the injected failures fail the run's health gate (exit 2): that is expected here
        _gym("eval", "run", "eval.yaml", cwd=work, allowed=(0, 2))
        version = _run_verifier_version(work / "run")
        _gym("export", "run", "--format", "nemo-gym", "--out", "ng/rollouts.jsonl", cwd=work)
        ng = work / "ng"
        sidecars = [ng / "rollouts_failures.jsonl", ng / "rollouts_materialized_inputs.jsonl"]
        checked = subprocess.run(
            [str(python), "-c", CHECK, str(ng / "rollouts.jsonl"), *map(str, sidecars)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ""},
        )
        if checked.returncode != 0:
            raise SystemExit(f"NeMo Gym's check failed:\n{checked.stderr[-3000:]}")
        report = {"benchmark": args.benchmark, "nemo_gym": json.loads(checked.stdout)}
        _gym("import", "nemo-gym", "ng/rollouts.jsonl", "--out", "back", cwd=work)
        before, after = (
            _store_counts(work / "run", version),
            _store_counts(work / "back", "imported"),
        )
        report["round_trip"] = {"before": before, "after": after, "equal": before == after}
        report["shipped_files"] = _import_shipped_files(args.venv, work, args.shipped)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
