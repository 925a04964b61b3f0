"""The one predicate that decides "simulated" (`gymflow.analysis.simulated`): what the answers
say, not what the config calls the server. Every surface reading it is tested with the runs of
tests/analysis/test_factors.py (the local policy, and `gym serve model` over the Responses API)."""

from __future__ import annotations

import json
from pathlib import Path

from gymflow.analysis.simulated import simulated
from gymflow.simulated import SIMULATED_MODEL
from gymflow.store.db import connect
from tests.analysis.builder import RunMeta, StoreBuilder


def _store(tmp_path: Path, model: str) -> Path:
    b = StoreBuilder(RunMeta(model=model))  # its answers name `model`
    b.task("t0", 1)
    b.fill("t0", "10")
    return b.write(tmp_path / model)


def test_answers_naming_the_simulation_are_simulated(tmp_path: Path) -> None:
    with connect(_store(tmp_path, SIMULATED_MODEL), read_only=True) as con:
        assert simulated(con) is True


def test_a_real_models_answers_are_not_simulated_whatever_the_config_says(tmp_path: Path) -> None:
    store = _store(tmp_path, "model-a")
    with connect(store) as con:
        con.execute("UPDATE runs SET config_json = ?", [json.dumps({"model": {"kind": "local"}})])
        assert simulated(con) is False


def test_a_local_run_with_no_answer_is_simulated(tmp_path: Path) -> None:
    store = _store(tmp_path, "model-a")
    with connect(store) as con:
        con.execute("DELETE FROM model_calls")
        con.execute("UPDATE runs SET config_json = ?", [json.dumps({"model": {"kind": "local"}})])
        assert simulated(con) is True
        con.execute(
            "UPDATE runs SET config_json = ?",
            [json.dumps({"model": {"kind": "responses", "base_url": "http://x/v1"}})],
        )
        assert simulated(con) is False
