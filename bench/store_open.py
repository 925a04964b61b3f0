"""What opening a run store costs: `gymflow.store.db.connect`, read-only (every analysis stage,
the report) and for writing (a run, reverify, aggregate), and the part of it spent listing the
objects the store holds beyond gymflow's schema (the check that refuses a store's own macros,
views and tables; nearly all of it is DuckDB listing its ~3,300 built-in functions). The cost
does not depend on the rollouts stored: the check reads the catalog only.

    python bench/store_open.py [--rounds 50]"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny import parse

from gymflow.store import db


def _median_ms(fn, rounds: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `fn()` (CPU: steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parse(parser, argv, rounds=3)
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        db.connect(run, create=True).close()
        reader = lambda: db.connect(run, read_only=True).close()  # noqa: E731
        writer = lambda: db.connect(run).close()  # noqa: E731
        con = db.connect(run, read_only=True)
        try:
            check = _median_ms(lambda: db._refuse_foreign_objects(con, run), args.rounds)
        finally:
            con.close()
        rows = [
            ("connect, read-only", _median_ms(reader, args.rounds)),
            ("connect, for writing", _median_ms(writer, args.rounds)),
            ("  of which: the foreign-object check", check),
        ]
    print(f"{'what':<40} {'wall ms':>8} {'CPU ms':>8}   (medians of {args.rounds} rounds)")
    for what, (wall, cpu) in rows:
        print(f"{what:<40} {wall:>8.1f} {cpu:>8.1f}")


if __name__ == "__main__":
    main()
