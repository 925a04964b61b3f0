"""The SQL against gymflow's tables, one module per concern: what a caller asks of a store, as
functions of a `gymflow.store.handle.Connection` that return rows or values. Heavy work stays
in SQL: a query aggregates in DuckDB and returns what it found, never every row for Python to
loop over.

- `answers`: what counts as an answer (SQL fragments health, profile and diagnosis share)
- `chat`: trajectories as chat messages, tools and conversations (training data)
- `diagnosis`: the joins behind the diagnosis's evidence, and the uncut answers' forms
- `exports`: the JSONL/Parquet, NeMo Gym and ATIF exports' rows, and NeMo Gym's scored verdicts
- `selections`: a dataset built from a run: its task table, prompts and rows
- `scores`: which rollouts count, per-task outcome counts and coverage
- `verdicts`: what reverify judges, carries over, checks again, and what flipped
- `report_views`: the report's layouts of stored rows (outcome grid, histograms, examples)
- `rollouts`, `model_calls`, `tasks`: small questions about one table (the `runs` and
  `verifier_versions` tables have theirs in `gymflow.store.runs` and
  `gymflow.store.verifier_versions`)"""
