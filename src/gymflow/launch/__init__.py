"""How a `gym` command starts: in a warm process when one serves this PREFECT_HOME, else here.

A command pays ~2 s importing Prefect, pydantic, DuckDB, polars and gymflow before it does any
work: most of a small run. `gym server --start` (and a terminal's first run, which starts the
local Prefect server) also starts a warm process that has imported all of it once; each later
command that can use it is forked from it, with the caller's terminal, arguments, environment,
folder and limits, and the caller waits for its exit code (`client`, `warm`,
`gymflow.warm_protocol`)."""
