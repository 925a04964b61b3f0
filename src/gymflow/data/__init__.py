"""Training data from evaluation rollouts: select tasks by how a policy did on them, export
trajectories for imitation and preference training, and profile a run as a training set.

Cut-off: pure functions over a run store (DuckDB SQL, Polars and NumPy); no Prefect. Tier 4."""

__tier__ = 4

__all__ = ["chat", "profile", "provenance", "rows", "select"]
