"""An analysis caps DuckDB's memory while it runs and leaves the setting as it found it; one
DuckDB cannot finish within the cap is refused, naming the store, never run again without it
(attack pass 7, s06: hostile values took health to 6.9 GB that way)."""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from gymflow.store.db import memory_capped, memory_capped_call, without_progress_bar
from gymflow.store.memory_bound import StoreOverMemory, analysis_memory
from gymflow.store.seal_key import SealKey, sealed
from gymflow.store.verdict_message import MESSAGE
from tests.conftest import ROOT


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


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _held_by_sealed(rows: int) -> float:
    """MiB more resident after `sealed` of `rows` messages of 20 KB than before, its result kept."""
    con = without_progress_bar(duckdb.connect())  # its stdout is the figures read
    select = (
        f"SELECT i AS row_number, encode(repeat(chr((65 + i % 26)::INTEGER), 20000)) AS {MESSAGE} "
        "FROM range(?) t(i)"
    )
    before = _resident_mib()
    kept = sealed(con, SealKey(b"k" * 32, "test"), select, [rows])
    held = _resident_mib() - before
    assert kept.num_rows == rows and kept.column_names == ["row_number", "seal"]
    con.close()
    return held


def test_sealed_rows_hold_no_message() -> None:
    """`sealed` reads the messages a vector at a time and keeps the other columns and the
    seals. A column of a batch DuckDB gives kept the whole batch alive, so the rows held every
    message until the last was sealed: a reverify of a million verdicts took 0.85 GiB more, and
    each message holds its rollout's whole trajectory. Now what is held beside the rows kept
    (about 40 bytes each) is the batches in flight, however many messages: 80 MB of them or
    240 MB (main: 160 MB more). Measured in a fresh interpreter: in a worker that has run other
    tests, the allocator's free lists moved the figures by 50 MB either way."""
    measured = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.test_store_memory import _held_by_sealed as held\n"
            "print(held(4096), held(3 * 4096))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    few, many = map(float, measured.stdout.split())
    assert many < few + 48, (few, many)
