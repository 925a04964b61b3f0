"""Rollouts in and out of gymflow stores: NeMo Gym rollout files, flat JSONL and Parquet.

Cut-off: converts files and stores; no Prefect. Tier 4."""

__tier__ = 4

__all__ = ["export", "nemo_gym"]
