"""The Prefect tasks of gymflow's flows (named steps here: a "task" is a benchmark row):
collecting a batch of rollouts, a shard, the analysis of a run, each cached by its inputs.

Cut-off: with `flows`, the only code that imports Prefect; each step calls a domain function
and adds no logic of its own. Tier 5."""

__tier__ = 5

__all__ = ["analysis", "rollouts", "shards"]
