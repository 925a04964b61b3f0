"""An analysis caps DuckDB's memory while it runs and leaves the setting as it found it; one
DuckDB cannot finish within the cap is refused, naming the store, never run again without it
(attack pass 7, s06: hostile values took health to 6.9 GB that way)."""

from __future__ import annotations

import duckdb
import pytest

from gymflow.store.db import memory_capped, memory_capped_call
from gymflow.store.memory_bound import StoreOverMemory, analysis_memory


def _limit(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def test_the_cap_holds_inside_and_the_setting_comes_back_after() -> None:
    con = duckdb.connect()
    default = _limit(con)
    with memory_capped(con, "1GB"):
        capped = _limit(con)
        with memory_capped(con, "1GB"):  # an analysis inside another changes nothing
            assert _limit(con) == capped
        assert _limit(con) == capped != default
    assert _limit(con) == default  # RESET, not the rounded figure set again
    con.execute("SET memory_limit = '5GB'")
    chosen = _limit(con)
    with memory_capped(con, "1GB"):  # a limit somebody chose wins
        assert _limit(con) == chosen
    assert _limit(con) == chosen


def test_an_analysis_out_of_memory_under_the_cap_is_refused_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", "1GB")
    con = duckdb.connect()
    default = _limit(con)
    seen = []

    @memory_capped_call
    def analysis(con) -> str:
        seen.append(_limit(con))
        raise duckdb.OutOfMemoryException("could not allocate block\nPossible solutions: ...")

    with pytest.raises(StoreOverMemory) as refused:
        analysis(con)
    assert len(seen) == 1 and seen[0] != default  # under the cap, once
    said = str(refused.value)
    assert "could not allocate block" in said and "1GB" in said and "\n" not in said
    assert "GYMFLOW_ANALYSIS_MEMORY" in said
    assert _limit(con) == default


@pytest.mark.parametrize("setting", ["lots", "3 parsecs", "0GB", "-1GB"])
def test_a_bound_that_is_not_a_size_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", setting)
    with pytest.raises(Exception, match="GYMFLOW_ANALYSIS_MEMORY") as refused:
        analysis_memory()
    assert refused.value.exit_code == 1  # pyright: ignore[reportAttributeAccessIssue]
