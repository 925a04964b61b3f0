"""The fast tier, as the README gives it (`-m "not slow"`), leaves the slow paths out at
collection (tests/conftest.py's SLOW_PATHS): the attack passes' replays are not even imported,
the other fault tests beside them are; `-m slow` collects the replays."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _collected(marks: str) -> set[str]:
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marks, "tests/faults"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return {line.split("::")[0] for line in ran.stdout.splitlines() if "::" in line}


def test_the_fast_tier_leaves_the_attack_replays_to_the_slow_one() -> None:
    fast, slow = _collected("not slow"), _collected("slow")
    replays = {str(p.relative_to(ROOT)) for p in (ROOT / "tests/faults").glob("test_attacks_*.py")}
    assert len(replays) > 50
    assert not fast & replays, sorted(fast & replays)
    assert "tests/faults/test_bad_input.py" in fast
    assert "tests/faults/test_attacks_seal.py" in slow
    assert replays <= slow, sorted(replays - slow)
