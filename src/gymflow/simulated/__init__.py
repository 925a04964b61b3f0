"""The simulated policy and its server: gymflow's own test double for a model."""

#: The `model` field of every answer the simulated policy server gives: how a store tells that a
#: simulation answered (`gymflow.analysis.simulated`), whichever way it was reached.
SIMULATED_MODEL = "gymflow-simulated-policy"
