"""`gym eval decide RUN --confirm` reran the decision's experiment from the run's stored config
with no look at its seals: the model server and the variable sent as its key came from the store.
Attack pass 5 (s08): a run someone sent (sealed with their key), or the owner's own run with its
config edited, named the attacker's server and the owner's OPENAI_API_KEY, and the owner's
routine confirmation sent the key there 112 times. Now a store names where credentials go only
when this machine sealed it and every seal matches; otherwise nothing is called."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.faults.recorder import recording_server
from tests.faults.stores import collect_run, edit_store, query, run_gym, tree_digest

OWNER_KEY = "sk-owner-secret-0123456789abcdef"


def _point_at(run: Path, url: str) -> None:
    [(stored,)] = query(run / "gymflow.duckdb", "SELECT config_json FROM runs")
    config = json.loads(stored)
    config["model"] = {"kind": "responses", "base_url": url, "name": "gpt-x",
                       "api_key_env": "OPENAI_API_KEY"}  # fmt: skip
    edit_store(run, "UPDATE runs SET config_json = '" + json.dumps(config).replace("'", "''") + "'")


@pytest.mark.parametrize(
    ("whose", "spelling"),
    [("own_edited", "http://"), ("foreign", "http://"), ("foreign", "//")],
)
def test_confirm_calls_no_server_a_store_names_unless_this_machine_sealed_it(
    tmp_path: Path, prefect_api: str, whose: str, spelling: str
) -> None:
    """`//host:port/v1` is pass 6's s10: aiohttp sent it as HTTP, and the check for a server
    looked for `://`. A server's URL is now http:// or https://, so the config is refused."""
    run = collect_run(tmp_path / "run", limit=10, repeats=2)
    env = {"OPENAI_API_KEY": OWNER_KEY}
    if whose == "foreign":  # the run was sealed by its sender's key, not this machine's
        env["GYMFLOW_SEAL_KEY"] = secrets.token_hex(32)
    with recording_server() as attacker:
        _point_at(run, attacker.url.replace("http://", spelling))
        before = tree_digest(run)
        done = run_gym("eval", "decide", str(run), "--confirm", cwd=tmp_path,
                       prefect_api=prefect_api, env=env)  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stdout + done.stderr
    expected = {
        ("own_edited", "http://"): "its seals fail (the inputs",
        ("foreign", "http://"): "/v1 with the keys it names, and this store is sealed with a "
        "key this machine does not hold",
        ("foreign", "//"): "model.base_url: Value error, a server's URL begins with http://",
    }
    assert expected[whose, spelling] in said, said
    assert attacker.received == []  # no request, with or without the key
    assert OWNER_KEY not in done.stdout + done.stderr
    assert tree_digest(run) == before  # nothing written: no confirm/ folder, no outcome
