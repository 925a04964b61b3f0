"""The collector's GC settings (gymflow.rollouts.collect): held while any collector runs, restored
when the last one ends, even when local shards' collectors overlap in one process."""

from __future__ import annotations

import gc

from gymflow.rollouts.collect import GC_YOUNG_THRESHOLD, _run_long_gc


def test_overlapping_collectors_restore_the_gc_settings_when_the_last_ends() -> None:
    before = gc.get_threshold()
    first, second = _run_long_gc(), _run_long_gc()
    first.__enter__()
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
