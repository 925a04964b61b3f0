"""Datasets as environments: a benchmark YAML names a file or a Hub dataset, a field mapping and
a built-in verifier, and its rows run with no Python of the user's.

`spec` (the YAML's `dataset:` key), `readers` and `hub` (rows from files and the Hub), `mapping`
(rows to tasks, every problem named), `simulate` (what the local policy can answer),
`environment` (the environment itself) and `checks` (`gym env validate`). Nothing is imported
here, so reading a benchmark's YAML does not import the verifiers."""
