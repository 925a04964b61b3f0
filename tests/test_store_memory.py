"""An analysis caps DuckDB's memory while it runs and leaves the setting as it found it; one
DuckDB cannot finish within the cap runs again without it."""

from __future__ import annotations

import duckdb

from gymflow.store.db import memory_capped, memory_capped_call


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


def test_an_analysis_out_of_memory_under_the_cap_runs_again_uncapped() -> None:
    con = duckdb.connect()
    default = _limit(con)
    seen = []

    @memory_capped_call
    def analysis(con) -> str:
        seen.append(_limit(con))
        if len(seen) == 1:
            raise duckdb.OutOfMemoryException("could not allocate block")
        return "done"

    assert analysis(con) == "done"
    assert seen[0] != default and seen[1] == default
    assert _limit(con) == default
