"""A verifier worker killed by the out-of-memory killer (the host's, or that of the cgroup gymflow
runs in) was a `verifier_error`, left out of every score: an answer whose verification takes
more memory than there is took itself out of the denominator. Where the kernel's evidence shows
it (the worker died by SIGKILL while its cgroup's OOM-kill count rose), a verifier that runs the
answer's code records the answer failing: reward 0, reason `memory`, counted. A worker that
dies by SIGKILL without that evidence stays a `verifier_error`.

The OOM killer here is real: `gym eval reverify` runs in a memory cgroup of 400 MiB made for
the test (cgroup v1, as root; skipped elsewhere), and the verifier builds 2 GiB."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.verifiers.oom import CGROUP_ROOT
from tests.conftest import GYM
from tests.faults.stores import ROLLOUT_COLUMNS, collect_run, query

ENVS = Path(__file__).parent / "envs"  # memlab/
LIMIT = 400 << 20
ROLLOUTS = f"SELECT rollout_id, {ROLLOUT_COLUMNS} FROM rollouts ORDER BY rollout_id"


@pytest.fixture
def cgroup() -> Iterator[Path]:
    """A v1 memory cgroup under this process's own, limited to LIMIT with no swap past it."""
    own = next(
        (line.split(":", 2)[2].strip().lstrip("/") for line in
         Path("/proc/self/cgroup").read_text().splitlines()
         if "memory" in line.split(":", 2)[1].split(",")),
        None,
    )  # fmt: skip
    parent = CGROUP_ROOT / "memory" / (own or "")
    if own is None or os.geteuid() != 0 or not (parent / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    group = parent / f"gymflow-oom-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        if (group / "memory.memsw.limit_in_bytes").exists():
            (group / "memory.memsw.limit_in_bytes").write_text(str(LIMIT))
        yield group
    finally:
        group.rmdir()


def _reverify_in(group: Path, run: Path, *settings: str) -> dict:
    import subprocess

    done = subprocess.run(
        [GYM, "eval", "reverify", str(run), *(f"--set={s}" for s in settings), "--json"],
        env={**os.environ, "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)},
        preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _verdicts(run: Path, version: str) -> dict[str, tuple]:
    rows = query(
        run / "gymflow.duckdb",
        "SELECT r.task_id, v.status, v.reward, v.passed, v.failure_kind, v.details_json "
        "FROM verifications v JOIN rollouts r USING (rollout_id) WHERE v.verifier_version = ?",
        [version],
    )
    return {row[0]: row[1:] for row in rows}


def test_a_worker_the_oom_killer_ends_is_the_answer_failing_and_a_crash_is_not(
    cgroup: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(ENVS))
    run = collect_run(tmp_path / "run", benchmark=None, environment="memlab", limit=3, repeats=1)
    (judged,) = query(run / "gymflow.duckdb", "SELECT verifier_version FROM runs")[0]
    before = (_verdicts(run, judged), query(run / "gymflow.duckdb", ROLLOUTS))
    kills_before = int((cgroup / "memory.oom_control").read_text().split("oom_kill ")[1].split()[0])

    hoarded = _reverify_in(cgroup, run, "hoard_mb=2048")
    oom = _verdicts(run, hoarded["new_version"])
    kills = int((cgroup / "memory.oom_control").read_text().split("oom_kill ")[1].split()[0])
    assert kills > kills_before  # the kernel's OOM killer did end the worker
    status, reward, passed, kind, details = oom["mem-hoard"]
    assert (status, reward, passed, kind) == ("ok", 0.0, False, None)
    assert json.loads(details)["reason"] == "memory"
    assert oom["mem-fine"][:3] == ("ok", 1.0, True)
    assert hoarded["after"]["coverage"]["scored"] == 3  # the hoard counted, as a failure

    crashed = _reverify_in(cgroup, run, "crash=true")
    crash = _verdicts(run, crashed["new_version"])
    assert crash["mem-crash"][0] == "error" and crash["mem-crash"][3] == "verifier_error"
    assert crashed["after"]["coverage"]["scored"] == 2  # a verifier's own death: not scored

    # the rollouts and the run's own verdicts are as they were: reverify adds versions only
    assert (_verdicts(run, judged), query(run / "gymflow.duckdb", ROLLOUTS)) == before
