"""Run history: the catalog of the runs under a root, trends over time, and the regression gate.

Cut-off: reads stores and the catalog; no Prefect. Tier 4."""

__tier__ = 4

__all__ = ["catalog", "counted", "gate", "pins"]
