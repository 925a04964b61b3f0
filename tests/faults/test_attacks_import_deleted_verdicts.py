"""A verdict deleted from an import (issue 42, second attacker's pass over 84b21e2). A store
whose only verifier version is `imported` may hold completed rollouts without a verdict
honestly: a file's row without a reward was never judged. So the deletion check
(`store/sealed_first.py`) let every such store through, and an import whose failing rollouts'
outputs were rewritten to the reference and whose verdicts were deleted read as merely
missing; the owner's `gym eval reverify` then judged the edited outputs and sealed them.

Now an import seals which of its completed rollouts it stored without a verdict (with its
inputs, `store/sealed_inputs.py`): any other rollout without one is a deletion, refused by every
writer (exit 2, nothing written) and an integrity failure in health. A file's rows without a
reward still import, and are judged by reverify as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymflow.interop.nemo_read import FAILURE_CLASS
from tests.conftest import gym_in_process as gym  # commands on stored runs: no process needed
from tests.faults.stores import collect_run, edit_store, one_error_line, rollout_rows, tree_digest

FORGED_OUTPUTS = (
    "UPDATE rollouts SET output_text = 'Answer: ' || t.reference FROM tasks t "
    "WHERE t.task_id = rollouts.task_id AND rollouts.rollout_id IN "
    "(SELECT rollout_id FROM verifications WHERE NOT passed)"
)
DELETED = "DELETE FROM verifications WHERE NOT passed"


def _unscored(lines: list[dict], count: int) -> list[dict]:
    """The first `count` scored rows made rows whose grading is absent (no reward): imported
    as completed rollouts without a verdict."""
    done = 0
    for line in lines:
        if done < count and "reward" in line and FAILURE_CLASS not in line:
            del line["reward"]
            line[FAILURE_CLASS] = "verifier_error"
            line["gymflow_verification"] = {"status": "error", "failure_kind": "transient"}
            done += 1
    return lines


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("import")
    run = collect_run(folder / "source")
    gym("export", str(run), "--format", "nemo-gym", "--out", str(folder / "rollouts.jsonl"),
        cwd=folder, check=True)  # fmt: skip
    return folder / "rollouts.jsonl"


def _imported(source: Path, folder: Path, *, unscored: int = 0) -> Path:
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    rows = folder / "rollouts.jsonl"
    rows.write_text("".join(json.dumps(line) + "\n" for line in _unscored(lines, unscored)))
    for sidecar in source.parent.glob(f"{source.stem}_*"):
        (folder / sidecar.name).write_bytes(sidecar.read_bytes())
    gym("import", "nemo-gym", str(rows), "--out", str(folder / "imp"), "--environment",
        "arithmetic", cwd=folder, check=True)  # fmt: skip
    return folder / "imp"


def _health(run: Path, cwd: Path) -> tuple[int, str, list[str]]:
    done = gym("eval", "health", str(run), "--json", cwd=cwd)
    report = json.loads(done.stdout)
    return done.returncode, report["verdict"], sorted(report["gate_failures"])


def test_a_verdict_deleted_from_an_import_is_refused_and_fails_health(
    exported: Path, tmp_path: Path
) -> None:
    run = _imported(exported, tmp_path, unscored=2)
    # the rows without a reward read as missing verdicts, and nothing else
    assert _health(run, tmp_path) == (2, "unhealthy", ["verification_missing"])
    edit_store(run, FORGED_OUTPUTS, DELETED)
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    code, verdict, failures = _health(run, tmp_path)
    assert (code, verdict) == (2, "unhealthy") and "inputs_edited" in failures, failures
    for command in (
        ("eval", "reverify", str(run)),
        ("export", str(run), "--format", "nemo-gym", "--out", str(tmp_path / "again.jsonl")),
    ):
        done = gym(*command, cwd=tmp_path)
        line = one_error_line(done.stderr)
        assert done.returncode == 2 and "verdicts were deleted" in line, (command, line)
        assert str(run / "gymflow.duckdb") in line and "nothing was written" in line, line
    assert rollout_rows(run / "gymflow.duckdb") == stored and tree_digest(run) == digest


def test_an_import_s_rows_without_a_reward_are_still_judged_by_reverify(
    exported: Path, tmp_path: Path
) -> None:
    run = _imported(exported, tmp_path, unscored=3)
    unjudged = [row for row in rollout_rows(run / "gymflow.duckdb").values() if row[13] is None]
    assert len(unjudged) == 3
    assert _health(run, tmp_path) == (2, "unhealthy", ["verification_missing"])
    done = gym("eval", "reverify", str(run), "--make-current", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _health(run, tmp_path) == (0, "healthy", [])
