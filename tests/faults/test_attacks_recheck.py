"""`gym eval reverify RUN --check` against stores forged to pass it or made to crash it.

The check judged the stored rollouts again under the parameters the store says the version
has, and compared only the verdicts the store holds: parameters edited to a tolerance that
passes every answer made consistently forged verdicts agree, and deleting the failing verdicts
left nothing to disagree with (exit 0 both times). A NULL or non-JSON value in a column it reads
was a traceback. Now parameters that are not the ones the version's name hashes fail the check,
a completed rollout without a verdict is a difference, and a corrupt value is one line naming
the store, the row and the column; nothing is written either way."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym as gym_process
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.recorder import recording_server
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    resealed,
    rollout_rows,
    tree_digest,
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run of `collect_run`'s config every test here forges a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


def _check(run, cwd):
    return gym("eval", "reverify", str(run), "--check", "--json", cwd=cwd)


def test_parameters_edited_to_pass_everything_fail_the_check(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    edit_store(
        run,
        "UPDATE verifier_versions SET params_json = "
        """'{"extract": "last_number", "abs_tol": 1e300}'""",
        "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
    )
    before = tree_digest(run)
    out = _check(run, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["params_named"] is False and found["agrees"] is False
    assert found["code_changed"] is False  # the code did not change: the parameters did
    text = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    assert text.returncode == 2
    assert "were edited in the store" in " ".join(text.stdout.split())
    assert tree_digest(run) == before


def test_deleted_failing_verdicts_are_differences(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    failing = {
        r
        for (r,) in duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
        .execute("SELECT rollout_id FROM verifications WHERE NOT passed")
        .fetchall()
    }
    assert failing
    edit_store(run, "DELETE FROM verifications WHERE NOT passed")
    before = tree_digest(run)
    out = _check(run, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["count"] == len(failing) and found["checked"] == 12
    assert {d["rollout_id"] for d in found["disagreements"]} == failing
    assert all(d["stored"].startswith("no verdict") for d in found["disagreements"])
    assert tree_digest(run) == before


def test_null_keys_of_a_forged_verdict_are_listed(honest: Path, tmp_path) -> None:
    run = copied_run(honest, tmp_path / "run")
    edit_store(
        run,
        "UPDATE rollouts SET repeat_index = NULL",
        "UPDATE verifications SET passed = true, reward = 1 WHERE NOT passed",
    )
    out = _check(run, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert all(d["repeat_index"] is None for d in json.loads(out.stdout)["disagreements"])


STORED = [
    ("UPDATE tasks SET data_json = 'nope'", "data_json is not JSON"),
    ("UPDATE tasks SET data_json = '[1]'", "data_json holds a JSON list"),
    # refused where the store opens (store/stored_values.py), before any command reads them
    ("UPDATE verifier_versions SET params_json = '[1]'", "params_json: JSON list, not an object"),
    ("UPDATE verifier_versions SET params_json = 'nope'", "params_json: not JSON"),
]
# A text-only verifier's reverify reads no trajectory (a corrupt one changes no verdict); the
# check judges each rollout with its trajectory.
TRAJECTORIES = [
    ("UPDATE rollouts SET trajectory_json = '[1,'", "trajectory_json is not JSON"),
    ("UPDATE rollouts SET trajectory_json = '{}'", "trajectory_json holds a JSON dict"),
]


#: A task's stored copy is compared with the benchmark's before it is parsed (tasks come from
#: the benchmark: store/../task_source.py): an integrity failure, exit 2; and every stored
#: input is sealed, so a writer refuses an edited one before reading it (store/sealed_inputs.py).
DIFFERS = (2, "the stored data_json differs from the benchmark's")
EDITED = (1, "edited in the file; nothing written")


@pytest.mark.parametrize(
    ("edit", "expected", "command"),
    [(e, DIFFERS, ("--check",)) for e, _ in STORED[:2]]
    + [(e, (1, n), ("--check",)) for e, n in STORED[2:] + TRAJECTORIES]
    + [(e, EDITED, ("--set", "abs_tol=0.5")) for e, _ in STORED[:2]]
    + [(e, (1, n), ("--set", "abs_tol=0.5")) for e, n in STORED[2:]],
)
def test_a_corrupt_stored_value_is_named_and_nothing_is_written(
    honest: Path, tmp_path, edit: str, expected: tuple[int, str], command: tuple[str, ...]
) -> None:
    code, named = expected
    run = copied_run(honest, tmp_path / "run")
    edit_store(run, edit)
    before = rollout_rows(run / "gymflow.duckdb")
    versions = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True).execute(
        "SELECT * FROM verifier_versions"
    )
    stored_versions = versions.fetchall()
    versions.close()
    out = gym("eval", "reverify", str(run), *command, cwd=tmp_path)
    error = " ".join(out.stderr.split())
    assert out.returncode == code, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "gymflow bug" not in error
    assert str(run / "gymflow.duckdb") in error and named in error
    assert rollout_rows(run / "gymflow.duckdb") == before
    with duckdb.connect(str(run / "gymflow.duckdb"), read_only=True) as con:
        assert con.execute("SELECT * FROM verifier_versions").fetchall() == stored_versions


def test_a_server_that_judges_the_trajectory_is_not_text_only(tmp_path, monkeypatch) -> None:
    """`text_only` came from the verifier alone: an environment whose resources server judges
    the trajectory itself (its own `verify_sync`, as NeMo Gym's does) over a text-only verifier
    had every rollout of a text judged with an empty trajectory, one verdict for all. A reverify
    stores what judging each rollout on its own gives."""
    from gymflow.environments.registry import load_environment
    from gymflow.environments.resources import ResourcesServer
    from gymflow.reverify.new_version import reverify
    from gymflow.verifiers.base import VerifyInput

    class ReadsTheTrajectory(ResourcesServer):
        def verify_sync(self, inp: VerifyInput):
            return self.judged(float(bool(inp.trajectory)), None, {}, source="test")

    monkeypatch.setattr(
        type(load_environment("arithmetic")),  # the class reverify loads by name
        "resources_server",
        lambda self, params=None: ReadsTheTrajectory(self, params),
    )
    run = collect_run(tmp_path / "run")
    # repeats of one answer whose trajectories differ (the simulated policy answers alike)
    edit_store(run, "UPDATE rollouts SET trajectory_json = '[]' WHERE repeat_index = 0")
    resealed(
        run / "gymflow.duckdb"
    )  # as if collected so: reverify refuses a store whose seals do not match
    done = reverify(run, {"abs_tol": 0.5})
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    stored = con.execute(
        "SELECT r.trajectory_json, v.reward FROM verifications v JOIN rollouts r "
        "USING (rollout_id) WHERE v.verifier_version = ?",
        [done.new_version],
    ).fetchall()
    con.close()
    assert len(stored) == 12
    assert sorted(reward for _, reward in stored) == [0.0] * 6 + [1.0] * 6
    assert all(reward == float(bool(json.loads(t or "[]"))) for t, reward in stored)


def _judged_benchmark(root, judge: str) -> None:
    """A dataset benchmark graded by math_judge at `judge`, under `root`/envs."""
    bench = root / "envs" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "judged.jsonl").write_text(
        "".join(
            json.dumps({"id": f"j{i}", "question": f"What is {i}+{i}?", "answer": 2 * i}) + "\n"
            for i in range(1, 4)
        )
    )
    (bench / "judged.yaml").write_text(
        "name: judged\ndescription: graded by a judge model\n"
        "dataset: {path: judged.jsonl, fields: {id: id, prompt: [question], "
        "verifier: {answer: answer}}}\n"
        f"verifier: {{name: math_judge, params: {{base_url: '{judge}', api_key_env: JUDGE_KEY, "
        "verify_first: false}}\nprompt_template: '{{ question }}'\nrepeats: 1\n"
    )


def test_edited_judge_parameters_reach_nothing(tmp_path, monkeypatch) -> None:
    """An attacker's pass (a17): one UPDATE pointed a math_judge version's stored `base_url` at
    the attacker's server and its `api_key_env` at the variable holding the owner's key;
    `--check` built the judge from them and sent the key as a Bearer token before saying the
    parameters were edited. Now nothing is judged under parameters or inputs that read as
    edited: the check fails and no request leaves. (The seal key's own variable is refused as
    any api_key_env: test_attacks_form.)"""
    _judged_benchmark(tmp_path, "http://127.0.0.1:9/v1")
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path / "envs"))
    run = collect_run(tmp_path / "run", benchmark="judged", limit=3, repeats=1)
    with recording_server() as attacker:
        (params,) = (
            duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
            .execute("SELECT params_json FROM verifier_versions")
            .fetchone()
        )
        edited = {**json.loads(params), "base_url": attacker.url}
        edit_store(run, f"UPDATE verifier_versions SET params_json = '{json.dumps(edited)}'")
        before = tree_digest(run)
        # a process, as a user's: the key in its environment is what must not travel
        keys = {"GYMFLOW_SEAL_KEY": "0" * 64, "JUDGE_KEY": "owner-judge-key"}
        out = gym_process("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path,
                          env=keys)  # fmt: skip
    assert attacker.received == []  # on 2a91e13: three requests, each with the key as a Bearer
    assert out.returncode == 2, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["judged"] is False and found["checked"] == 0 and found["agrees"] is False
    assert tree_digest(run) == before


def test_a_run_someone_sent_names_no_judge_to_send_the_owners_key_to(tmp_path, monkeypatch):
    """Attack pass 5 (s02): a run judged by an LLM judge, sealed with its sender's key, whose
    verifier version (named by its own parameters, so nothing reads as edited) names the
    sender's judge URL and the owner's JUDGE_KEY variable. The owner's routine `reverify
    --check` sent the key there. Now a store this machine did not seal names no server a
    verifier calls: the check judges nothing (exit 2, saying why), and a reverify is refused
    (a writer refuses a store sealed by another key in any case)."""
    with recording_server() as attacker:
        _judged_benchmark(tmp_path, attacker.url)
        monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path / "envs"))
        run = collect_run(tmp_path / "run", benchmark="judged", limit=3, repeats=1)
        attacker.received.clear()  # the sender's own run asked its judge; the owner's follow
        before = tree_digest(run)
        owner = {"GYMFLOW_SEAL_KEY": "1" * 64, "JUDGE_KEY": "owner-judge-key"}
        checked = gym_process("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path,
                              env=owner)  # fmt: skip
        again = gym_process("eval", "reverify", str(run), "--set", "threshold=0.4",
                            cwd=tmp_path, env=owner)  # fmt: skip
    assert attacker.received == []
    assert tree_digest(run) == before
    assert checked.returncode == 2, checked.stdout + checked.stderr
    found = json.loads(checked.stdout)
    assert found["judged"] is False and found["agrees"] is False
    assert f"its stored parameters name {attacker.url}" in found["unjudged_why"]
    assert again.returncode == 1, again.stdout + again.stderr
    assert "a key this machine does not hold" in " ".join(again.stderr.split())
