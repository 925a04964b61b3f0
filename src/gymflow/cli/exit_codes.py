"""The exit codes of every `gym` command (docs/reference/exit-codes.md is this module, in prose)."""

from __future__ import annotations

import signal

#: The command did what was asked; a run's health gate passed.
OK = 0
#: Bad usage, config or input: a flag, a file, a name or a store the message names. Nothing was
#: run or written; fix what the message says and run again.
BAD_INPUT = 1
#: The command ran, and its verdict is negative: a health gate failed (`gym eval health`, and
#: `gym eval run` whose run failed its gate), or `gym eval aggregate --strict` left rollouts
#: missing.
GATE_FAILED = 2
#: A failure while running: the model server died (the run stopped early), the store could not
#: be written, shards failed, or an unexpected error. What finished is kept; `--resume` continues.
RUNTIME = 3
#: Stopped by a signal, shell style (128 + its number): 130 for SIGINT (Ctrl-C), 143 for
#: SIGTERM (systemd, Kubernetes, `docker stop`) and for a cancellation in Prefect. Finished
#: rollouts are committed; `--resume` continues.
INTERRUPTED = 128 + signal.SIGINT
TERMINATED = 128 + signal.SIGTERM
