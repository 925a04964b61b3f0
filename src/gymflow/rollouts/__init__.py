"""Rollout collection: turning a config into a plan (`plan`, `validate`), and a plan into stored
rollouts (`collect`, `registration`, `published`), with stopping rules, merges and what travels
with a run to its workers (`travel`).

Cut-off: runs episodes and writes their rows; no Prefect. Tier 3, beside `analysis`."""

__tier__ = 3

__all__ = [
    "collect",
    "collection",
    "merge",
    "outcomes",
    "plan",
    "published",
    "registration",
    "stopping",
    "travel",
    "validate",
]
