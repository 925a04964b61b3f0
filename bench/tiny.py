"""`--tiny`: every bench script's seconds-long run, which the test suite runs so that a change
that breaks a benchmark fails CI (tests/bench/test_tiny.py). A tiny run prints the same table at
sizes too small to mean anything; the defaults it sets give way to any flag given explicitly."""

from __future__ import annotations

import argparse


def parse(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, **tiny: object
) -> argparse.Namespace:
    parser.add_argument(
        "--tiny", action="store_true", help="a run of seconds that proves the script works"
    )
    if parser.parse_known_args(argv)[0].tiny:
        parser.set_defaults(**tiny)
    return parser.parse_args(argv)
