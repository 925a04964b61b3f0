"""DuckDB prints a progress bar on stdout for a query past 2 s, whether stdout is a terminal or
a pipe (a test reading a subprocess's figures on a loaded machine read "100%" among them), so
`gym eval profile --json` of a large store would begin with one. Every DuckDB file gymflow
opens (a run's store, the history catalog) has it off."""

from __future__ import annotations

from pathlib import Path

from gymflow.history.catalog import _open_catalog
from gymflow.store.db import connect


def test_every_duckdb_file_gymflow_opens_has_it_off(tmp_path: Path) -> None:
    store = connect(tmp_path / "run", create=True)
    catalog, _path = _open_catalog(tmp_path / "runs")
    try:
        for con in (store, catalog):
            assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (
                False,
            )
    finally:
        store.close()
        catalog.close()
