"""The decision on a single run of an external agent (`command` harness) whose cause is known:
rollouts the agent lost (crashed) or whose model-call record it broke are harness work, never
model training, and where they dominate the run's evidence by the margin the decision is that
harness work, even though they also break the run's health."""

from __future__ import annotations

import json
from pathlib import Path

from gymflow.analysis.results import RunAnalysis
from gymflow.analysis.run import analyse
from gymflow.core.statuses import FAILED
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder

AGENT = {"harness": {"name": "command", "agent": "mini-swe-agent", "max_turns": 8}}


def _agent_run(crashed: int, wrong: int, passing: int = 1) -> StoreBuilder:
    """`crashed` tasks the agent crashed on (both repeats, after one model call each), `wrong`
    tasks it answered wrong, `passing` tasks it solved."""
    b = StoreBuilder(RunMeta(harness="command", config=AGENT, repeats=2))
    for i in range(crashed + wrong + passing):
        b.task(f"t{i}", 100 + i)
    for i in range(crashed + wrong + passing):
        for repeat in range(2):
            record = b.rollout(f"t{i}", repeat, correct=i >= crashed + wrong)
            record.counters = {"agent_logged_calls": 1}
            if i < crashed:
                record.status, record.verification = FAILED, None
                record.failure_kind = "agent_crashed"
                record.error = "exit status 139: Segmentation fault"
    return b


def _analyse(b: StoreBuilder, path: Path) -> RunAnalysis:
    b.write(path)
    con = connect(path, read_only=True)
    try:
        return analyse(con)
    finally:
        con.close()


def _model_training_tasks(result: RunAnalysis) -> list[str]:
    (training,) = [c for c in result.decision.candidates if c.action == "model_training"]
    return training.experiment.tasks if training.experiment else []


def test_an_agent_that_crashes_on_most_tasks_is_harness_work(tmp_path: Path) -> None:
    """Five of eight tasks crashed: the run is unhealthy (failed_share), and the decision is the
    harness work that explains it, with the crashes as evidence and the confirming experiment
    the same tasks under gymflow's own agent; the two wrong tasks stay model-side."""
    result = _analyse(_agent_run(crashed=5, wrong=2), tmp_path / "run")
    assert result.health.verdict == "unhealthy" and result.health.broken == ["failed_share"]
    decision = result.decision
    assert decision.action == "harness_work", decision.why
    assert decision.margin is not None and decision.margin >= 0.9
    assert decision.evidence is not None
    assert decision.evidence.categories == {"agent_failed": 10}
    assert "agent_crashed: 10" in decision.why and "failed_share" in decision.why
    assert decision.experiment is not None
    assert decision.experiment.change["harness"]["agent"] == "tool_loop"
    assert decision.experiment.tasks == [f"t{i}" for i in range(5)]
    assert _model_training_tasks(result) == ["t5", "t6"]


def test_a_crash_on_one_task_of_eight_does_not_decide_it(tmp_path: Path) -> None:
    """One crashed task beside six answered wrong: harness work leads some resamples of the
    tasks, not 90% of them, so the agent does not explain the run; model training is still read
    only from the tasks the model answered."""
    result = _analyse(_agent_run(crashed=1, wrong=6), tmp_path / "run")
    assert result.decision.action == "fix_health"
    runner_up = result.decision.runner_up
    assert runner_up is not None
    assert _model_training_tasks(result) == [f"t{i}" for i in range(1, 7)]


def test_calls_the_agent_made_and_the_proxy_did_not_record_are_harness_work(
    tmp_path: Path,
) -> None:
    """Answered wrong on five tasks, but the agent's own log counts three calls where the proxy
    recorded one: those verdicts are not evidence of the model (the agent reached a model the
    record does not hold), so they are harness work, not model training."""
    b = _agent_run(crashed=0, wrong=7)
    for record in b.rollouts:
        if record.task_id in {f"t{i}" for i in range(5)}:
            record.counters = {"agent_logged_calls": 3}
    result = _analyse(b, tmp_path / "run")
    assert result.health.broken == ["agent_calls_unrecorded"]
    decision = result.decision
    assert decision.action == "harness_work", decision.why
    assert decision.evidence is not None
    assert decision.evidence.categories == {"unrecorded": 10}
    assert _model_training_tasks(result) == ["t5", "t6"]


def test_a_dead_model_server_is_not_the_agents_failure(tmp_path: Path) -> None:
    """The same layout with the model server failing instead of the agent: no agent evidence,
    so fixing the health (the server) comes first, as for any harness."""
    b = _agent_run(crashed=5, wrong=2)
    for record in b.rollouts:
        if record.failure_kind == "agent_crashed":
            record.failure_kind, record.error = "server_error", "HTTP 500"
    result = _analyse(b, tmp_path / "run")
    assert result.decision.action == "fix_health"
    assert result.decision.runner_up is not None
    assert result.decision.runner_up.categories.get("agent_failed") is None


def test_an_agent_that_finished_after_its_commands_answered_wrong(tmp_path: Path) -> None:
    """A completed mini-swe-agent rollout ends with the output of its last command (its submit):
    no sign of a turn limit, which an agent reports as `agent_step_limit`. Judged wrong on
    tasks no repeat passes, it is model training's evidence, not the harness's."""
    b = _agent_run(crashed=0, wrong=2)
    for record in b.rollouts:
        call = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"}
        output = {"type": "function_call_output", "call_id": "c1", "output": "done"}
        record.trajectory = [*record.trajectory, call, output]
        record.num_turns = 2
    result = _analyse(b, tmp_path / "run")
    (training,) = [c for c in result.decision.candidates if c.action == "model_training"]
    assert training.categories == {"wrong": 4}
    assert result.decision.action == "model_training", result.decision.why


def test_the_agent_experiment_is_judged_by_the_share_that_ends_judged(tmp_path: Path) -> None:
    """The crashed tasks have no scored rollout before, so a pass rate cannot pair them: the
    measure is the share of each task's rollouts that ends judged, 0 as stored. A rerun where
    they finish confirms the agent lost them, even where the model then answers them wrong; a
    rerun where they are lost again does not."""
    from gymflow.store.queries.scores import task_judged_shares
    from gymflow.study.confirm import judged

    result = _analyse(_agent_run(crashed=5, wrong=2), tmp_path / "run")
    experiment = result.decision.experiment
    assert experiment is not None and experiment.measure == "judged_share"
    with connect(tmp_path / "run", read_only=True) as con:
        version = con.execute("SELECT verifier_version FROM runs").fetchone()[0]
        before = dict(task_judged_shares(con, version, [f"t{i}" for i in range(8)]))
    assert before == {f"t{i}": (0.0 if i < 5 else 1.0) for i in range(8)}
    lost_tasks = {t: before[t] for t in experiment.tasks}
    finished = judged(experiment, lost_tasks, dict.fromkeys(experiment.tasks, 1.0), "rerun")
    assert finished.effect and (finished.gained, finished.lost) == (5, 0), finished.why
    half = {t: (0.5 if i % 2 else 0.0) for i, t in enumerate(experiment.tasks)}
    assert judged(experiment, lost_tasks, half, "rerun").effect  # 2 of 5 rose, none fell
    again = judged(experiment, lost_tasks, dict.fromkeys(experiment.tasks, 0.0), "rerun")
    assert not again.effect and "judged share 0% -> 0%" in again.why


def _calls(*commands: str) -> list[dict]:
    """Each command as a call and its output, as an agent's trajectory holds them."""
    items: list[dict] = []
    for i, command in enumerate(commands):
        arguments = json.dumps({"command": command})
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "bash",
                      "arguments": arguments})  # fmt: skip
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "ok"})
    return items


def _stopped_at_the_limit(path: Path, commands: tuple[str, ...], **meta) -> RunAnalysis:
    """Five tasks stopped at the agent's step limit after `commands`, two answered wrong, one
    passed."""
    b = _agent_run(crashed=5, wrong=2, **meta)
    for record in b.rollouts:
        if record.failure_kind == "agent_crashed":
            record.failure_kind, record.error = "agent_step_limit", "step limit 8 reached"
            record.trajectory = [*record.trajectory, *_calls(*commands)]
    return _analyse(b, path)


def test_an_agent_stopped_at_its_step_limit_on_its_way_is_harness_work(tmp_path: Path) -> None:
    """Different commands up to the limit: the agent was working when it was stopped, so a
    longer limit (the harness) is what the evidence points at."""
    result = _stopped_at_the_limit(tmp_path / "run", ("ls", "cat a.py", "pytest -q", "sed -i x"))
    assert result.decision.action == "harness_work", result.decision.why
    assert result.decision.evidence is not None
    assert result.decision.evidence.categories == {"agent_failed": 10}


def test_an_agent_stopped_at_its_step_limit_in_a_loop_is_the_models(tmp_path: Path) -> None:
    """The same command again and again up to the limit: the model was stuck, and a longer
    limit buys more of the same. Those rollouts are the model's loops, read by their tasks'
    bucket (never passing here: model training), not harness work."""
    result = _stopped_at_the_limit(tmp_path / "run", ("ls", "cat a.py", *["pytest -q"] * 3))
    candidates = {c.action: c for c in result.decision.candidates}
    assert candidates["harness_work"].rollouts == 0
    assert candidates["model_training"].categories == {"loop": 10, "wrong": 4}
    assert result.decision.action in ("model_training", "fix_health"), result.decision.why


def test_the_harness_turn_limit_reached_in_a_loop_is_the_models(tmp_path: Path) -> None:
    """gymflow's own tool_loop, stopped at max_turns: on its way (different calls) it is
    harness work; repeating one call it is the model's loop. Same rule, any harness."""
    for commands, harness, model in ((("a", "b", "c"), 4, 0), (("a", "b", "b", "b"), 0, 4)):
        b = StoreBuilder(RunMeta(harness="tool_loop", repeats=2))
        for i in range(3):
            b.task(f"t{i}", 100 + i)
            for repeat in range(2):
                record = b.rollout(f"t{i}", repeat, correct=i == 2)
                if i < 2:
                    record.counters = {"max_turns_reached": 1}
                    record.trajectory = [*record.trajectory, *_calls(*commands)]
        folder = tmp_path / "-".join(commands)
        result = _analyse(b, folder)
        candidates = {c.action: c for c in result.decision.candidates}
        assert candidates["harness_work"].rollouts == harness, commands
        assert candidates["model_training"].categories.get("loop", 0) == model, commands
