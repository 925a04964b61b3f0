"""What decides a number besides the verdicts, edited in the store (issue 42, attacker's pass
over 193679f), and what a store holds that ran on the host:

- code in `tasks.data_json`: reverify rebuilt tasks from the store and code_exec loaded the
  stored `test` in the trusted process; a test edited in the file wrote the seal key out during
  `gym eval reverify RUN --check`, a command that writes nothing;
- the answer key in `tasks` edited to the model's wrong answers: healthy, and the next routine
  reverify sealed verdicts against it;
- a lenient what-if version (its parameters copied from the original's) made the run's
  version: pass@1 57.5% -> 100%, healthy, `version_read` naming the run's own parameters.

Now tasks come from the benchmark (a stored copy that differs is an integrity failure, exit 2,
nothing run), and the tasks, run row, verifier versions with their parameters and the current
version are sealed (`store/sealed_inputs.py`): health fails `inputs_edited`, `--check` exits 2,
and every writer refuses to seal over them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.environments.registry import load_environment
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.conftest import require_tool
from tests.faults.stores import (
    as_an_older_gymflow_left_it,
    collect_run,
    edit_store,
    one_error_line,
    rollout_rows,
    tree_digest,
)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("clean") / "run", limit=20, repeats=2)


def _copy(clean: Path, folder: Path) -> Path:
    run = folder / "run"
    shutil.copytree(clean, run)
    return run


def _numbers(run: Path, cwd: Path) -> dict:
    """Health's verdict and failing checks, profile's scores: every number the run gives."""
    checked = gym("eval", "health", str(run), "--json", cwd=cwd)
    report = json.loads(checked.stdout)
    # profile prints an edited store's numbers, flagged by its seals, and exits 2
    read = gym("eval", "profile", str(run), "--json", cwd=cwd)
    profiled = json.loads(read.stdout)
    assert read.returncode == (0 if profiled["seals"]["intact"] is not False else 2), read.stderr
    return {
        "health": (checked.returncode, report["verdict"], sorted(report["gate_failures"])),
        "pass@1": profiled["pass@1"],
        "profile": profiled,
    }


def test_an_answer_key_edited_to_the_wrong_answers_fails_and_is_never_sealed(
    clean: Path, tmp_path: Path
) -> None:
    """Every failing task's answer and reference set to what the model answered: health fails
    `inputs_edited`; `reverify --check` exits 2 naming the task and field; a routine reverify
    is refused before judging (nothing written, nothing sealed against the edited key)."""
    before = _numbers(clean, tmp_path)
    assert before["health"][:2] == (0, "healthy") and before["pass@1"] < 1.0
    run = _copy(clean, tmp_path)
    edit_store(
        run,
        """
        UPDATE tasks SET
            data_json = json_object('answer', TRY_CAST(regexp_extract(
                (SELECT min(r.output_text) FROM rollouts r JOIN verifications v USING (rollout_id)
                 WHERE r.task_id = tasks.task_id AND NOT v.passed), '(-?[0-9.]+)\\s*$', 1)
                AS DOUBLE)),
            reference = 'edited'
        WHERE task_id IN (SELECT r.task_id FROM rollouts r JOIN verifications v
                          USING (rollout_id) WHERE NOT v.passed)
        """,
    )
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["health"] == (2, "unhealthy", ["inputs_edited"]), after["health"]
    checked = gym("eval", "reverify", str(run), "--check", cwd=tmp_path)
    line = one_error_line(checked.stderr)
    assert checked.returncode == 2 and "differs from the benchmark's" in line, checked.stderr
    routine = gym("eval", "reverify", str(run), "--set", "abs_tol=0.001", cwd=tmp_path)
    line = one_error_line(routine.stderr)
    assert routine.returncode == 1 and "edited in the file; nothing written" in line, line
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
    assert _numbers(clean, tmp_path) == before


def test_a_lenient_version_made_the_run_s_version_fails_health_and_check(
    clean: Path, tmp_path: Path
) -> None:
    """The owner's what-if (every answer within 1000 passes) is stored, not current; the
    attacker copies the original's parameters into its row and makes it current. Before the
    seal: pass@1 to 1.0, healthy. Now: `inputs_edited`, `--check` exits 2, `use-version` (a
    writer) refuses, nothing changes."""
    run = _copy(clean, tmp_path)
    gym("eval", "reverify", str(run), "--set", "abs_tol=1000", cwd=tmp_path, check=True)
    before = _numbers(run, tmp_path)
    assert before["health"][:2] == (0, "healthy") and before["pass@1"] < 1.0
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    original, lenient = (
        row[0]
        for row in con.execute(
            "SELECT verifier_version FROM verifier_versions ORDER BY created_at"
        ).fetchall()
    )
    con.close()
    edit_store(
        run,
        f"""UPDATE verifier_versions SET params_json = (SELECT params_json FROM verifier_versions
            WHERE verifier_version = '{original}') WHERE verifier_version = '{lenient}'""",
        f"INSERT INTO meta VALUES ('current_verifier_version', '{lenient}') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["pass@1"] == 1.0  # what the attack gives the numbers...
    assert after["health"] == (2, "unhealthy", ["inputs_edited"])  # ...and what health says
    checked = gym("eval", "reverify", str(run), "--check", "--json", cwd=tmp_path)
    assert checked.returncode == 2 and json.loads(checked.stdout)["inputs_sealed"] is False
    back = gym("eval", "use-version", str(run), original, cwd=tmp_path)
    assert back.returncode == 1 and "nothing written" in one_error_line(back.stderr)
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def test_only_the_current_choice_edited_fails_too(clean: Path, tmp_path: Path) -> None:
    run = _copy(clean, tmp_path)
    gym("eval", "reverify", str(run), "--set", "abs_tol=1000", cwd=tmp_path, check=True)
    edit_store(
        run,
        "UPDATE runs SET verifier_version = (SELECT max(verifier_version) "
        "FROM verifier_versions WHERE verifier_version <> runs.verifier_version)",
    )
    assert _numbers(run, tmp_path)["health"] == (2, "unhealthy", ["inputs_edited"])


def test_a_store_sealed_before_its_inputs_were_is_migrated_by_its_next_writer(
    clean: Path, tmp_path: Path
) -> None:
    """A store written before (seal record version 1, no inputs seal) reads as it did; its next
    writer (`use-version`) seals the inputs and records version 2, after which removing the
    inputs seal is an edit, not an older store."""
    run = _copy(clean, tmp_path)
    as_an_older_gymflow_left_it(run, 1)
    assert _numbers(run, tmp_path)["health"][:2] == (0, "healthy")
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    version = con.execute("SELECT verifier_version FROM runs").fetchone()[0]
    con.close()
    gym("eval", "use-version", str(run), version, cwd=tmp_path, check=True)
    edit_store(run, "DELETE FROM meta WHERE key = 'inputs_seal'")
    assert _numbers(run, tmp_path)["health"] == (2, "unhealthy", ["inputs_edited"])


def test_test_code_edited_in_the_store_never_runs_on_the_host(tmp_path: Path) -> None:
    """A HumanEval import whose stored test writes a file when loaded: `reverify --check` and
    a reverify exit with the integrity failure naming `data_json`, and the file is not there
    (the test was never loaded); the stored data are unchanged. The unedited copy judges."""
    require_tool("bwrap")
    task = load_environment("humaneval").tasks("test")[0]
    rows = [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": task.data["prompt"]}]
            },
            "response": {
                "id": f"resp_{i}",
                "model": "m",
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": task.reference}],
                    }
                ],
            },
            "reward": 1.0,
            "_ng_task_index": 0,
            "_ng_rollout_index": i,
            "task_id": task.task_id,
        }
        for i in range(2)
    ]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gym("import", "nemo-gym", "rollouts.jsonl", "--out", "run", "--environment", "humaneval",
        cwd=tmp_path, check=True)  # fmt: skip
    gym("eval", "reverify", "run", "--set", "timeout_s=5", "--make-current", cwd=tmp_path,
        check=True)  # fmt: skip
    shutil.copytree(tmp_path / "run", tmp_path / "honest")
    marker = tmp_path / "ran-on-the-host"
    planted = f"open({str(marker)!r}, 'w').write('key')\n" + task.data["test"]
    literal = "'" + planted.replace("'", "''") + "'"
    edit_store(
        tmp_path / "run",
        f"UPDATE tasks SET data_json = json_merge_patch(data_json, json_object('test', {literal}))",
    )
    run = tmp_path / "run"
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    for command, code, says in (
        (("--check",), 2, "task 'HumanEval/0': the stored data_json differs"),
        (("--set", "timeout_s=6"), 1, "edited in the file; nothing written"),
    ):
        done = gym("eval", "reverify", "run", *command, cwd=tmp_path)
        line = one_error_line(done.stderr)
        assert done.returncode == code and says in line, done.stderr
        assert not marker.exists()
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
    honest = gym("eval", "reverify", "honest", "--check", "--json", cwd=tmp_path)
    assert honest.returncode == 0 and json.loads(honest.stdout)["agrees"], honest.stdout


@pytest.mark.parametrize(
    "record",
    [
        "DELETE FROM meta WHERE key IN ('seal', 'inputs_seal')",
        "UPDATE meta SET value = 'garbled' WHERE key = 'seal'",
    ],
    ids=["deleted", "garbled"],
)
def test_a_removed_seal_record_does_not_switch_the_inputs_check_off(
    clean: Path, tmp_path: Path, record: str
) -> None:
    """An attacker's pass (a01, a02, a02b): with the store's seal record deleted or garbled and
    the inputs' seal deleted, `inputs_edited` read "skipped": the owner's what-if made current
    took pass@1 to 1.0, healthy, and the owner's next routine reverify sealed it afresh. A
    record that is gone or not this key's own requires the inputs' seal: health fails and the
    writer refuses, nothing written."""
    run = _copy(clean, tmp_path)
    gym("eval", "reverify", str(run), "--set", "abs_tol=1000", cwd=tmp_path, check=True)
    con = duckdb.connect(str(run / "gymflow.duckdb"), read_only=True)
    lenient = con.execute(
        "SELECT verifier_version FROM verifier_versions ORDER BY created_at DESC LIMIT 1"
    ).fetchone()[0]
    con.close()
    edit_store(
        run,
        record,
        "DELETE FROM meta WHERE key = 'inputs_seal'",
        f"INSERT INTO meta VALUES ('current_verifier_version', '{lenient}') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    after = _numbers(run, tmp_path)
    assert after["pass@1"] == 1.0
    assert after["health"][:2] == (2, "unhealthy") and "inputs_edited" in after["health"][2]
    routine = gym("eval", "reverify", str(run), "--set", "rel_tol=1e-9", cwd=tmp_path)
    assert routine.returncode == 1 and "nothing written" in one_error_line(routine.stderr)
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest
