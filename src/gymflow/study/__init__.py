"""Ablation studies: a baseline config and variants that each change one factor.

Cut-off: the study's spec and its results; the flow that runs one is `gymflow.flows.study`.
Tier 4."""

__tier__ = 4

__all__ = ["results", "spec"]
