"""A run's id is the hash of its config (`EvalConfig.fingerprint`): a store written by an earlier
gymflow must hash to the same id under this one, or it no longer resumes, aggregates or
confirms. Every stored run kept as a fixture (real models' runs, written before later config
keys existed) is checked: a key added without its entry in `ADDED_KEYS` changes their ids."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import ADDED_KEYS, NOT_FACTORS, EvalConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STORES = sorted(FIXTURES.rglob("gymflow.duckdb.gz"))


@pytest.mark.parametrize("packed", STORES, ids=lambda p: p.parent.name)
def test_a_stored_run_keeps_its_id(packed: Path, tmp_path: Path) -> None:
    store = tmp_path / "gymflow.duckdb"
    with gzip.open(packed) as source, store.open("wb") as target:
        shutil.copyfileobj(source, target)
    con = duckdb.connect(str(store), read_only=True)
    try:
        run_id, config_json = con.execute("SELECT run_id, config_json FROM runs").fetchone()
    finally:
        con.close()
    assert EvalConfig.model_validate(json.loads(config_json)).fingerprint() == run_id


def test_every_added_key_is_a_config_key_and_no_non_factor() -> None:
    assert STORES
    data = EvalConfig.model_validate({"benchmark": "arithmetic-smoke"}).model_dump(mode="json")
    for key in ADDED_KEYS:
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        assert leaf in node, key
        assert key not in NOT_FACTORS, key
