"""The fast tier, as the README gives it (`-m "not slow"`), leaves the slow paths out at
collection (tests/conftest.py's SLOW_PATHS): the attack passes' replays are not even imported,
the other fault tests beside them are; every test of a replay is marked slow."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _collected(marks: str, *paths: str) -> set[str]:
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marks, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode in (0, 5), ran.stdout + ran.stderr  # 5: none collected
    return {line.split("::")[0] for line in ran.stdout.splitlines() if "::" in line}


def test_the_fast_tier_leaves_the_attack_replays_to_the_slow_one() -> None:
    fast = _collected("not slow", "tests/faults")
    replays = {str(p.relative_to(ROOT)) for p in (ROOT / "tests/faults").glob("test_attacks_*.py")}
    assert len(replays) > 50
    assert not fast & replays, sorted(fast & replays)
    assert "tests/faults/test_bad_input.py" in fast
    # named on the command line, a replay is collected and its every test marked slow
    replay = "tests/faults/test_attacks_seal.py"
    assert _collected("slow", replay) == {replay}
    assert _collected("not slow", replay) == set()
