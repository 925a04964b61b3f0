"""What a run's rows say: health checks, the profile, pass@k, diagnosis, distributions, paired
comparisons and the decision between two runs, as typed results (`results`).

Cut-off: pure functions over a store (SQL and NumPy); no Prefect, no files written. Tier 3,
beside `rollouts`."""

__tier__ = 3

__all__ = [
    "compare",
    "decide",
    "diagnose",
    "factors",
    "frames",
    "harness_evidence",
    "health",
    "health_checks",
    "outcomes",
    "paired",
    "passk",
    "profile",
    "results",
    "run",
    "seals",
    "simulated",
    "stats",
]
