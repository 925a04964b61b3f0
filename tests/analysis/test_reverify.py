"""Reverify flips exactly the rollouts whose verdict changes, keeps the old version intact, and
never calls the policy model."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import EvalConfig
from gymflow.core.tasks import Task
from gymflow.models import client as model_client
from gymflow.reverify.new_version import ReverifyError, parse_settings, reverify
from gymflow.rollouts.collect import run_collect
from gymflow.rollouts.plan import resolve
from gymflow.rollouts.registration import register_run
from gymflow.simulated.endpoint import model_endpoint
from gymflow.store.db import connect
from gymflow.verifiers.base import VerifyInput, get_verifier
from tests.analysis.builder import RunMeta, StoreBuilder, reseal
from tests.conftest import ROOT, gym_in_process


@pytest.fixture
def no_policy_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to build a model client (the only way gymflow reaches a policy) fails."""

    def refuse(*args, **kwargs):
        raise AssertionError("reverify tried to construct a policy model client")

    monkeypatch.setattr(model_client.ResponsesClient, "__init__", refuse)


def _arithmetic_store(path: Path) -> StoreBuilder:
    b = StoreBuilder(RunMeta(repeats=3))
    for i in range(8):
        b.task(f"t{i}", 20 + i)
        answer = 20 + i
        texts = [
            f"Answer: {answer}",  # right under both modes
            f"The result is {answer}.",  # no Answer: line -> only last_number passes
            f"Answer: {answer}\nDouble-checked against {answer + 5}.",  # only answer_line passes
        ]
        for repeat, text in enumerate(texts if i % 2 == 0 else texts[:1] * 3):
            b.rollout(f"t{i}", repeat, text=text)
    b.write(path)
    return b


def _rows(path: Path, version: str) -> list[tuple]:
    con = duckdb.connect(str(path / "gymflow.duckdb"), read_only=True)
    try:
        return con.execute(
            "SELECT * EXCLUDE (created_at) FROM verifications WHERE verifier_version = ? "
            "ORDER BY rollout_id",
            [version],
        ).fetchall()
    finally:
        con.close()


def _expected_flips(path: Path, verifier: str, old: dict, new: dict) -> tuple[set, set]:
    """Judge every stored output directly under both parameter sets."""
    spec = get_verifier(verifier)
    con = duckdb.connect(str(path / "gymflow.duckdb"), read_only=True)
    rows = con.execute(
        "SELECT r.rollout_id, r.output_text, t.data_json FROM rollouts r JOIN tasks t "
        "USING (task_id) WHERE r.status = 'completed'"
    ).fetchall()
    con.close()
    to_pass, to_fail = set(), set()
    for rollout_id, text, data in rows:
        task = Task("x", {}, json.loads(data), "", "")
        before = spec.fn(VerifyInput(task, text), spec.params(old)).reward >= 1.0
        after = spec.fn(VerifyInput(task, text), spec.params(new)).reward >= 1.0
        if after and not before:
            to_pass.add(rollout_id)
        if before and not after:
            to_fail.add(rollout_id)
    return to_pass, to_fail


def test_arithmetic_extract_mode_flips_exactly(tmp_path: Path, no_policy_model) -> None:
    run = tmp_path / "run"
    b = _arithmetic_store(run)
    old_rows = _rows(run, b.verifier_version)
    result = reverify(run, {"extract": "last_number"}).as_json()
    to_pass, to_fail = _expected_flips(
        run, "numeric_match", {"extract": "answer_line"}, {"extract": "last_number"}
    )
    assert len(to_pass) == 4 and len(to_fail) == 4
    assert set(result["flips"]["rollouts"]["to_pass"]) == to_pass
    assert set(result["flips"]["rollouts"]["to_fail"]) == to_fail
    assert result["base_version"] == b.verifier_version != result["new_version"]
    assert result["reverified"] == 24 and result["status"] == "written"
    assert _rows(run, b.verifier_version) == old_rows  # old version untouched
    assert len(_rows(run, result["new_version"])) == 24
    # tasks t0, t2, t4, t6 lose one pass and gain one: their count is unchanged
    assert result["flips"]["tasks"] == []
    assert result["before"]["pass@1"] == pytest.approx(result["after"]["pass@1"])
    again = reverify(run, {"extract": "last_number"}, base_version=b.verifier_version).as_json()
    assert again["status"] == "already stored" and again["reverified"] == 0


@pytest.mark.parametrize("text_only", [True, False])
def test_each_distinct_answer_is_judged_once_by_a_text_only_verifier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text_only: bool
) -> None:
    """numeric_match reads only the text (`text_only`): a reverify judges each distinct text of
    a task once and stores its verdict for every rollout that gave it, without reading any
    trajectory. A verifier that reads more is given every rollout with its trajectory. Both
    store the verdicts judging each rollout on its own gives."""
    from gymflow.environments.resources import ResourcesServer

    run = tmp_path / "run"
    _arithmetic_store(run)
    seen: list[VerifyInput] = []
    judge = ResourcesServer.verify_sync
    monkeypatch.setattr(ResourcesServer, "text_only", property(lambda self: text_only))
    monkeypatch.setattr(
        ResourcesServer, "verify_sync", lambda self, inp: seen.append(inp) or judge(self, inp)
    )
    result = reverify(run, {"extract": "last_number"})
    assert result.reverified == 24
    con = connect(run, read_only=True)
    distinct = con.execute("SELECT count(DISTINCT (task_id, output_text)) FROM rollouts").fetchone()
    con.close()
    assert distinct[0] < 24  # the store repeats answers
    assert len(seen) == (distinct[0] if text_only else 24)
    assert all((inp.trajectory == []) == text_only for inp in seen)
    spec = get_verifier("numeric_match")
    params = spec.params({"extract": "last_number"})
    con = connect(run, read_only=True)
    stored = con.execute(
        "SELECT r.output_text, t.data_json, v.reward FROM verifications v "
        "JOIN rollouts r USING (rollout_id) JOIN tasks t USING (task_id) "
        "WHERE v.verifier_version = ?",
        [result.new_version],
    ).fetchall()
    con.close()
    assert len(stored) == 24
    for text, data, reward in stored:
        task = Task("x", {}, json.loads(data), "", "")
        assert reward == spec.fn(VerifyInput(task, text), params).reward


def test_verdicts_sealed_in_parts_are_those_sealed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large reverify seals its staged verdicts a part at a time (`SEAL_PART`): every verdict
    is stored once, with the seal one statement gives it, and health finds every seal whole."""
    from gymflow.analysis.health import health
    from gymflow.store import writer

    whole, parted = tmp_path / "whole", tmp_path / "parted"
    for run in (whole, parted):
        _arithmetic_store(run)
    reverify(whole, {"extract": "last_number"})
    monkeypatch.setattr(writer, "SEAL_PART", 5)  # 24 verdicts: five parts
    result = reverify(parted, {"extract": "last_number"})
    assert _rows(parted, result.new_version) == _rows(whole, result.new_version)
    assert len(_rows(parted, result.new_version)) == 24
    con = connect(parted, read_only=True)
    try:
        checks = health(con, verifier_version=result.new_version).checks
    finally:
        con.close()
    assert checks["seal_mismatch"].status == "ok"
    assert checks["verdict_unsealed"].status == "ok"


def test_failed_only_carries_passing_verdicts(tmp_path: Path, no_policy_model) -> None:
    run = tmp_path / "run"
    b = _arithmetic_store(run)
    result = reverify(run, {"extract": "last_number"}, failed_only=True).as_json()
    assert result["reverified"] == 4  # only the 'The result is N.' rollouts failed before
    assert result["flips"]["rollouts"]["to_fail"] == []
    assert len(result["flips"]["rollouts"]["to_pass"]) == 4
    new_rows = _rows(run, result["new_version"])
    assert len(new_rows) == 24
    con = connect(run, read_only=True)
    carried = con.execute(
        "SELECT count(*) FROM verifications WHERE verifier_version = ? "
        "AND details_json::JSON->>'carried_from' = ?",
        [result["new_version"], b.verifier_version],
    ).fetchone()[0]
    con.close()
    assert carried == 20


def test_a_full_reverify_judges_again_what_failed_only_carried(tmp_path: Path) -> None:
    """`--failed-only` carries the base version's passes into the new version, whose parameters
    never judged them: "Answer: 8. Check: 3+4=7" passed under last_number and stayed a pass of
    answer_line's version (pass@1 75% where it is 50%), and the full reverify that followed
    answered "already stored"."""
    b = StoreBuilder(RunMeta(verifier_params={"extract": "last_number"}))
    b.task("t0", 7)
    b.task("t1", 5)
    for task_id, repeat, text in (
        ("t0", 0, "Answer: 8. Check: 3+4=7"),
        ("t0", 1, "Answer: 7"),
        ("t1", 0, "Answer: 5"),
        ("t1", 1, "Answer: 6"),
    ):
        b.rollout(task_id, repeat, text=text)
    b.write(tmp_path / "run")
    strict = ("eval", "reverify", "run", "--set", "extract=answer_line", "--json")
    # a reverify of a stored run: no process needed
    carried = gym_in_process(*strict, "--failed-only", cwd=tmp_path)
    assert carried.returncode == 0, carried.stdout + carried.stderr
    assert json.loads(carried.stdout)["reverified"] == 1  # the one wrong under last_number
    full = gym_in_process(*strict, cwd=tmp_path)
    assert full.returncode == 0, full.stdout + full.stderr
    result = json.loads(full.stdout)
    assert (result["status"], result["reverified"]) == ("rejudged", 3)
    assert result["after"]["pass@1"] == 0.5
    con = duckdb.connect(str(tmp_path / "run" / "gymflow.duckdb"), read_only=True)
    try:
        verdicts = dict(
            con.execute(
                "SELECT r.output_text, v.passed FROM rollouts r JOIN verifications v "
                "USING (rollout_id) WHERE v.verifier_version = ?",
                [result["new_version"]],
            ).fetchall()
        )
    finally:
        con.close()
    assert verdicts == {
        "Answer: 8. Check: 3+4=7": False,
        "Answer: 7": True,
        "Answer: 5": True,
        "Answer: 6": False,
    }


def test_bad_settings_and_stateful_environments_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ReverifyError, match="expected KEY=VALUE"):
        parse_settings(["mode"])
    assert parse_settings(["n=3", "strict=true", "mode=loose"]) == {
        "n": 3,
        "strict": True,
        "mode": "loose",
    }
    run = tmp_path / "run"
    _arithmetic_store(run)
    before = _rows(run, StoreBuilder().verifier_version)
    with pytest.raises(ReverifyError, match="nope"):
        reverify(run, {"nope": 1})
    envs = tmp_path / "envs" / "stateful"
    envs.mkdir(parents=True)
    manifest = (ROOT / "src/gymflow/builtin/arithmetic/environment.yaml").read_text()
    (envs / "environment.yaml").write_text(
        manifest.replace("name: arithmetic", "name: stateful").replace(
            "reverify_stateless: true", "reverify_stateless: false"
        )
    )
    (envs / "env.py").write_text(
        "from gymflow.environments.base import Environment\n\n"
        "class ArithmeticEnvironment(Environment):\n"
        "    def generate(self, split):\n        return []\n"
    )
    monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path / "envs"))
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    con.execute("UPDATE runs SET environment = 'stateful'")
    con.close()
    with connect(run) as sealed:
        reseal(sealed)
    with pytest.raises(ReverifyError, match="reverify_stateless: false"):
        reverify(run, {"extract": "last_number"})
    # in-process: the registry has read this folder (its cache is keyed by the path) and nothing
    # in it changes after
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(tmp_path / "envs")}
    out = gym_in_process(
        "eval", "reverify", "run", "--set", "extract=last_number", cwd=tmp_path, env=env
    )
    assert out.returncode == 1 and "--force" in out.stderr
    con = connect(run, read_only=True)
    versions = con.execute("SELECT count(*) FROM verifier_versions").fetchone()[0]
    con.close()
    assert versions == 1 and _rows(run, StoreBuilder().verifier_version) == before
    forced = gym_in_process(
        "eval",
        "reverify",
        "run",
        "--set",
        "extract=last_number",
        "--force",
        "--json",
        cwd=tmp_path,
        env=env,
    )
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["flips"]["rollouts"]["count"] == 8


@pytest.fixture(scope="module")
def ifeval_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ifeval run: the collector against the local policy server (no Prefect needed)."""
    out = tmp_path_factory.mktemp("ifeval") / "run"
    config = EvalConfig(benchmark="ifeval", limit=30, repeats=2, out=str(out))
    plan = resolve(config)
    con = connect(out, create=True)
    try:
        register_run(con, plan, resume=False)
        with model_endpoint(plan) as base_url:
            run_collect(plan, plan.keys(), con, base_url=base_url)
    finally:
        con.close()
    return out


def test_ifeval_strict_to_loose(ifeval_run: Path, no_policy_model) -> None:
    con = connect(ifeval_run, read_only=True)
    (old_version,) = con.execute("SELECT verifier_version FROM verifier_versions").fetchone()
    calls = con.execute("SELECT count(*) FROM model_calls").fetchone()[0]
    con.close()
    old_rows = _rows(ifeval_run, old_version)
    result = reverify(ifeval_run, {"mode": "loose"}).as_json()
    to_pass, to_fail = _expected_flips(ifeval_run, "ifeval", {"mode": "strict"}, {"mode": "loose"})
    assert to_pass, "the local policy plays loose-only references: some rollouts must flip"
    assert set(result["flips"]["rollouts"]["to_pass"]) == to_pass
    assert set(result["flips"]["rollouts"]["to_fail"]) == to_fail == set()
    assert result["after"]["pass@1"] > result["before"]["pass@1"]
    assert _rows(ifeval_run, old_version) == old_rows
    con = connect(ifeval_run, read_only=True)
    assert con.execute("SELECT count(*) FROM model_calls").fetchone()[0] == calls
    con.close()
