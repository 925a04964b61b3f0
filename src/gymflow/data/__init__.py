"""Training data from evaluation rollouts: select tasks by how a policy did on them, export
trajectories for imitation and preference training, and profile a run as a training set.

Pure functions over a run store (DuckDB SQL, Polars and NumPy); no Prefect here."""
