"""`gym export --format atif` judged by Harbor's own validator (harbor/utils/trajectory_validator.py
and its ATIF pydantic models, from the `harbor` package in GYMFLOW_HARBOR_VENV), and an ATIF file
Harbor's models wrote read back into Responses items. Skipped locally without Harbor, a failure
in CI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gymflow.core.atif import AtifError, atif_to_items, rollout_to_atif
from tests.conftest import LedgerRun, gym
from tests.servers import venv_with


def harbor_python() -> Path:
    venv = venv_with(
        "GYMFLOW_HARBOR_VENV",
        "/tmp/harbor-venv",
        "python",
        "python3.12 -m venv /tmp/harbor-venv && /tmp/harbor-venv/bin/pip install harbor "
        "(.ci/run does)",
    )
    python = venv / "bin" / "python"
    found = subprocess.run([str(python), "-c", "import harbor"], capture_output=True, timeout=120)
    if found.returncode != 0:
        pytest.fail(f"{venv} has no harbor package: {found.stderr.decode()[-500:]}")
    return python


def validate(python: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    """Harbor's validator CLI on each file, as a Harbor user runs it."""
    script = (
        "import sys, runpy\n"
        "failed = 0\n"
        "for path in sys.argv[1:]:\n"
        "    sys.argv = ['trajectory_validator', path]\n"
        "    try:\n"
        "        runpy.run_module('harbor.utils.trajectory_validator', run_name='__main__')\n"
        "    except SystemExit as exit:\n"
        "        failed += bool(exit.code)\n"
        "sys.exit(failed)\n"
    )
    return subprocess.run(
        [str(python), "-c", script, *map(str, files)], capture_output=True, text=True, timeout=300
    )


def test_exported_rollouts_pass_harbors_validator(ledger_run: LedgerRun, tmp_path: Path) -> None:
    python = harbor_python()
    out = tmp_path / "atif"
    result = gym("export", str(ledger_run.run_dir), "--format", "atif", "--out", str(out),
                 cwd=tmp_path, check=True)  # fmt: skip
    files = sorted(out.glob("*.json"))
    assert files and f"wrote {len(files)} rollouts" in result.stdout
    checked = validate(python, files)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert checked.stdout.count("valid") >= len(files)
    documents = [json.loads(path.read_text()) for path in files]
    steps = [step for doc in documents for step in doc["steps"]]
    assert {"system", "user", "agent"} >= {step["source"] for step in steps}
    called = [step for step in steps if step.get("tool_calls")]
    assert called and all(step.get("observation") for step in called)
    assert any(step.get("reasoning_content") for step in steps)  # the run asked for reasoning
    assert any(step.get("metrics", {}).get("prompt_tokens") for step in steps)
    assert all(doc["extra"]["task_id"] and "reward" in doc["extra"] for doc in documents)


def test_a_hostile_trajectory_still_validates(tmp_path: Path) -> None:
    """Arguments that are not JSON, an output answering no call, an empty trajectory."""
    python = harbor_python()
    odd = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "s"}]},
        {"type": "function_call_output", "call_id": "nobody", "output": {"x": 1}},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        "not an item",
    ]
    files = []
    for name, trajectory in [("odd", odd), ("empty", [])]:
        document = rollout_to_atif(
            {"rollout_id": name, "trajectory": trajectory}, [], agent="a", agent_version="1",
            model=None,
        )  # fmt: skip
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(document))
    checked = validate(python, files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    odd_steps = json.loads(files[0].read_text())["steps"]
    assert odd_steps[2]["tool_calls"][0]["arguments"] == {"raw": "{not json"}


def test_an_atif_file_harbor_wrote_reads_back_as_items(tmp_path: Path) -> None:
    python = harbor_python()
    target = tmp_path / "harbor.json"
    script = f"""
from harbor.models.trajectories import Agent, Step, ToolCall, Observation, ObservationResult, \\
    Trajectory, Metrics
steps = [
    Step(step_id=1, source="user", message="Fix calc.py"),
    Step(step_id=2, source="agent", message="Running the tests.", reasoning_content="plan",
         tool_calls=[ToolCall(tool_call_id="t1", function_name="bash",
                              arguments={{"command": "pytest -q"}})],
         observation=Observation(results=[ObservationResult(source_call_id="t1",
                                                            content="1 failed")]),
         metrics=Metrics(prompt_tokens=10, completion_tokens=5)),
    Step(step_id=3, source="agent", message="Fixed."),
]
trajectory = Trajectory(agent=Agent(name="terminus-2", version="2.0"), steps=steps)
open({str(target)!r}, "w").write(trajectory.model_dump_json(exclude_none=True))
"""
    subprocess.run([str(python), "-c", script], check=True, timeout=120)
    items = atif_to_items(json.loads(target.read_text()), source=str(target))
    assert [item["type"] for item in items] == [
        "message", "reasoning", "message", "function_call", "function_call_output", "message",
    ]  # fmt: skip
    assert items[3]["name"] == "bash" and json.loads(items[3]["arguments"]) == {
        "command": "pytest -q"
    }
    assert items[4] == {"type": "function_call_output", "call_id": "t1", "output": "1 failed"}
    back = rollout_to_atif({"trajectory": items}, [], agent="a", agent_version="1", model=None)
    assert [s["source"] for s in back["steps"]] == ["user", "agent", "agent"]


def test_a_file_that_is_not_atif_is_refused_naming_the_step() -> None:
    with pytest.raises(AtifError, match=r"x.json: steps\[1\].source"):
        atif_to_items({"steps": [{"source": "user", "message": "hi"}, {"source": "robot"}]},
                      source="x.json")  # fmt: skip
    with pytest.raises(AtifError, match=r"tool_calls\[0\]\.arguments"):
        atif_to_items({"steps": [{"source": "agent", "message": "", "tool_calls": [
            {"tool_call_id": "1", "function_name": "f", "arguments": "text"}]}]})  # fmt: skip
