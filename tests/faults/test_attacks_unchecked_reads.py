"""Read commands that printed a forged store's numbers with no seal check. An attacker's pass
(a03): a store whose 16 failing outputs were rewritten to the reference and whose verdicts were
set to pass (DuckDB only, no key) was unhealthy to `gym eval health` (seal_mismatch 16), yet
`gym runs list` showed pass@1 60.0% -> 100.0% (CI 82.0-100.0%), nothing flagged, `gym runs
trend` drew it, and `gym data select --dry-run` kept 0 tasks where the honest store keeps 2
(the selection writes the next benchmark). `history/catalog.py: read_entry` read `headline`
only; the data commands read pass rates only.

Now the catalog reads the store's seals (once per store state, as profile does): a run whose
seals fail is listed with no pass@1 and a line saying why, and left out of a trend; `gym data
select`, `trajectories` and `profile` refuse it in one line."""

from __future__ import annotations

import json

import pytest

from tests.conftest import gym_in_process as gym  # reads of stored runs: no process needed
from tests.faults.stores import collect_run, edit_store, one_error_line, query, tree_digest

#: The attacker's forge.py: each failing verdict's output rewritten to the task's reference
#: (its trajectory to match) and its verdict passed.
FORGE = (
    """CREATE TEMP TABLE f AS SELECT v.rollout_id, t.reference AS new,
        json_extract_string(v.details_json,'$.extracted') AS x,
        json_extract(v.details_json,'$.expected') AS e
       FROM verifications v JOIN rollouts r USING (rollout_id)
       JOIN tasks t ON t.task_id = r.task_id AND t.run_id = r.run_id WHERE NOT v.passed""",
    """UPDATE rollouts SET output_text = f.new,
        trajectory_json = replace(replace(trajectory_json,
            'gives '||f.x||'.', 'gives '||regexp_extract(f.new,'Answer: (\\S+)',1)||'.'),
            'Answer: '||f.x, 'Answer: '||regexp_extract(f.new,'Answer: (\\S+)',1))
       FROM f WHERE rollouts.rollout_id = f.rollout_id""",
    """UPDATE verifications SET passed = true, reward = 1.0,
        details_json = '{"reason":"match","extracted":"'
          ||regexp_extract(f.new,'Answer: (\\S+)',1)||'","expected":'||f.e||'}'
       FROM f WHERE verifications.rollout_id = f.rollout_id""",
)


def _json(done) -> dict:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def forged(tmp_path_factory) -> dict:
    """The honest figures of a run, then the run forged as the attacker did."""
    root = tmp_path_factory.mktemp("unchecked") / "runs"
    run = collect_run(root / "nightly", limit=20)
    cwd = root.parent
    honest = {
        "list": _json(gym("runs", "list", str(root), "--json", cwd=cwd))["runs"],
        "select": _json(gym("data", "select", str(run), "--dry-run", "--json", cwd=cwd)),
    }
    failing = query(run / "gymflow.duckdb", "SELECT count(*) FROM verifications WHERE NOT passed")
    edit_store(run, *FORGE)
    return {"root": root, "run": run, "cwd": cwd, "honest": honest, "failing": failing[0][0]}


def test_runs_list_shows_a_forged_store_as_such(forged: dict) -> None:
    root, run, cwd = forged["root"], forged["run"], forged["cwd"]
    [honest] = forged["honest"]["list"]
    assert honest["seals"] == "intact" and 0 < honest["pass1"] < 1 and forged["failing"] > 0
    before = tree_digest(run)
    [entry] = _json(gym("runs", "list", str(root), "--json", cwd=cwd))["runs"]
    assert entry["pass1"] is None and entry["ci_low"] is None  # was 1.0, CI 0.82-1.0
    assert entry["seals"] == "edited"
    assert f"{forged['failing']} verdicts do not match their seal" in entry["seals_edited"]
    shown = gym("runs", "list", str(root), cwd=cwd)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "100.0%" not in shown.stdout and "seals fail" in shown.stdout
    assert f"{forged['failing']} verdicts do not match their seal" in shown.stdout
    assert tree_digest(run) == before


def test_runs_trend_leaves_a_forged_store_out(forged: dict) -> None:
    root, run, cwd = forged["root"], forged["run"], forged["cwd"]
    before = tree_digest(root)
    done = gym("runs", "trend", "arithmetic-smoke", "--root", str(root), cwd=cwd)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "100.0%" not in done.stdout
    assert "left out" in done.stderr and "seals fail" in done.stderr
    assert "whose seals hold (1 fail)" in one_error_line(done.stderr)
    assert tree_digest(root) == before  # no trend page drawn from it
    assert not (root / "trend-arithmetic-smoke.html").exists()
    assert run.exists()


@pytest.mark.parametrize(
    "command",
    [
        ("data", "select", "{run}", "--dry-run", "--json"),
        ("data", "select", "{run}"),
        ("data", "profile", "{run}"),
        ("data", "trajectories", "{run}", "--out", "{cwd}/chat.jsonl"),
    ],
)
def test_data_commands_refuse_a_forged_store(forged: dict, command: tuple[str, ...]) -> None:
    run, cwd = forged["run"], forged["cwd"]
    honest = forged["honest"]["select"]["counts"]
    assert honest["kept"] > 0  # the honest store keeps tasks (the attacker's: 2, forged: 0)
    before = tree_digest(run)
    args = [word.format(run=run, cwd=cwd) for word in command]
    done = gym(*args, cwd=cwd)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert str(run) in line and "its seals fail" in line, line
    assert f"{forged['failing']} verdicts do not match their seal" in line, line
    assert tree_digest(run) == before
    assert not (run / "data").exists() and not (cwd / "chat.jsonl").exists()
