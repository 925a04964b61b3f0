"""The simulated policy and its server: gymflow's own test double for a model.

Cut-off: answers as a model would over HTTP on 127.0.0.1; reads tasks, never the store. Tier 2."""

#: The `model` field of every answer the simulated policy server gives: how a store tells that a
#: simulation answered (`gymflow.analysis.simulated`), whichever way it was reached.
SIMULATED_MODEL = "gymflow-simulated-policy"

__tier__ = 2

__all__ = ["SIMULATED_MODEL", "endpoint", "policy_server"]
