"""Prefect flows, one per loop stage: a run, a shard, an aggregate, a reverify, a study and the
nightly run. Importing any of them keeps refused parameter values out of Prefect's log (below).

Cut-off: with `steps`, the only code that imports Prefect: a flow orders the steps of a run,
a shard, an aggregate, a reverify, a study or the nightly run, and holds no domain logic. Tier 5.
The deployments of these flows are in prefect.yaml (their entrypoints name files here)."""

from __future__ import annotations

import logging
import re

__tier__ = 5

__all__ = ["eval_run", "heartbeats", "labels", "lean", "parameters", "study"]

_VALIDATION_FAILED = re.compile(r"Parameter validation failed for flow ('.*?'|\".*?\")")


class _RefusedValuesNotLogged(logging.Filter):
    """Prefect logs a flow run's failed parameter validation with every error's input and the
    whole parameters dict (`prefect.flows`, sent to the API with the run's logs and printed):
    a value refused because it is a secret (a key in a URL, a key given as `api_key_env`) was
    shown there in plain text. The record keeps its first line and says where the reasons are:
    the run's error (Prefect's ParameterTypeError) lists each field with why, without values."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = _VALIDATION_FAILED.match(str(record.msg))
        if found:
            record.msg = (
                f"{found.group(0)}: the values given are not repeated here (a refused value may "
                "be a secret); the flow run's error names each field and why"
            )
            record.args = ()
        return True


logging.getLogger("prefect.flows").addFilter(_RefusedValuesNotLogged())
