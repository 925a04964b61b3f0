"""Rollouts in and out of gymflow stores: NeMo Gym rollout files, flat JSONL and Parquet."""
