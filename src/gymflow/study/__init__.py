"""Ablation studies: a baseline config and variants that each change one factor."""
