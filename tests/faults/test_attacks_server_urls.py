"""A server's URL is `http://` or `https://` with a host, wherever one is given. Attack pass 6
(s10, s11): `//127.0.0.1:PORT/v1` passed the URL check, aiohttp sent it as HTTP, and the check
that a store someone sent names no server (which looks for `://`) saw none: the owner's
`decide --confirm` and `reverify --check` sent OPENAI_API_KEY and JUDGE_KEY to the sender's
server, and its answers decided the outcome. Every spelling is now judged by one rule, in the
config, in a judge's parameters and in the Prefect form's pattern alike."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from gymflow.core.config import EvalConfig, ModelConfig
from gymflow.core.credentials import named_servers
from gymflow.verifiers.math_judge import MathJudgeParams
from tests.conftest import gym
from tests.faults.recorder import recording_server
from tests.faults.stores import collect_run, edit_store, query, tree_digest
from tests.faults.test_attacks_recheck import _judged_benchmark

SPELLINGS = {
    "http://127.0.0.1:8000/v1": True,
    "https://api.example.com/v1?x=1": True,
    "HTTP://127.0.0.1:8000/v1": True,
    "//127.0.0.1:8000/v1": False,
    "127.0.0.1:8000/v1": False,
    "host:80/v1": False,
    "http:///v1": False,
    "http:/127.0.0.1/v1": False,
    "ftp://127.0.0.1/v1": False,
    "unix:///tmp/socket": False,
    " http://127.0.0.1/v1": False,
}


def _accepted(make) -> bool:
    try:
        make()
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("url", sorted(SPELLINGS))
def test_one_rule_judges_every_spelling_wherever_a_server_is_named(url: str) -> None:
    form = EvalConfig.model_json_schema()["properties"]["resources_url"]["anyOf"][0]["pattern"]
    judged = {
        "model.base_url": _accepted(lambda: ModelConfig(kind="responses", base_url=url)),
        "resources_url": _accepted(lambda: EvalConfig(benchmark="x", resources_url=url)),
        "math_judge base_url": _accepted(lambda: MathJudgeParams(base_url=url)),
        "the form's pattern": re.match(form, url) is not None,
    }
    assert set(judged.values()) == {SPELLINGS[url]}, judged
    if SPELLINGS[url]:  # what is accepted is what a store's check for servers finds
        assert named_servers({"model": {"base_url": url}}) == [url]


def test_a_run_someone_sent_with_a_schemeless_judge_url_calls_nothing(tmp_path, monkeypatch):
    """s11: the sender's judged run (of a benchmark both share, whose judge is `judge`), its
    stored judge URL rewritten as the sender's server, `//host:port/v1`. The owner's `reverify
    --check` and a reverify send the sender nothing and write nothing."""
    with recording_server() as judge, recording_server() as attacker:
        _judged_benchmark(tmp_path, judge.url)
        monkeypatch.setenv("GYMFLOW_ENVIRONMENTS_PATH", str(tmp_path / "envs"))
        run = collect_run(tmp_path / "run", benchmark="judged", limit=3, repeats=1)
        [(params,)] = query(run / "gymflow.duckdb", "SELECT params_json FROM verifier_versions")
        schemeless = {**json.loads(params), "base_url": attacker.url.removeprefix("http:")}
        # named as the version those parameters would be (`Verifier.version`, over every field,
        # unvalidated: the sender's gymflow need not be this one), so nothing reads as edited
        dumped = MathJudgeParams.model_construct(**schemeless).model_dump(mode="json")
        text = json.dumps(dumped, sort_keys=True)
        version = f"math_judge@{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        edit_store(
            run,
            f"UPDATE verifier_versions SET verifier_version = '{version}', params_json = '{text}'",
            f"UPDATE verifications SET verifier_version = '{version}'",
            f"UPDATE runs SET verifier_version = '{version}'",
            "DELETE FROM meta WHERE key = 'current_verifier_version'",
        )
        attacker.received.clear()
        before = tree_digest(run)
        owner = {"GYMFLOW_SEAL_KEY": "1" * 64, "JUDGE_KEY": "owner-judge-key"}
        checked = gym("eval", "reverify", str(run), "--check", cwd=tmp_path, env=owner)
        again = gym("eval", "reverify", str(run), "--failed-only", cwd=tmp_path, env=owner)
    assert attacker.received == []
    assert tree_digest(run) == before
    for done in (checked, again):
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
