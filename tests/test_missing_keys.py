"""Which rollouts of a batch a store lacks: the question every collect-batch task asks first."""

from __future__ import annotations

from pathlib import Path

from gymflow.store.db import connect
from gymflow.store.runs import missing_keys


def test_only_the_runs_own_stored_pairs_count_and_the_order_is_kept(tmp_path: Path) -> None:
    con = connect(tmp_path, create=True)
    con.execute(
        """INSERT INTO rollouts (rollout_id, run_id, task_id, repeat_index, seed, status)
           VALUES ('a', 'run', 't1', 0, 0, 'completed'), ('b', 'run', 't2', 1, 0, 'failed'),
                  ('c', 'other', 't3', 0, 0, 'completed')"""
    )
    wanted = [("t3", 0), ("t2", 1), ("t1", 1), ("t1", 0), ("t2", 0)]
    assert missing_keys(con, "run", wanted) == [("t3", 0), ("t1", 1), ("t2", 0)]
    assert missing_keys(con, "other", wanted) == [("t2", 1), ("t1", 1), ("t1", 0), ("t2", 0)]
    assert missing_keys(con, "run", []) == []
