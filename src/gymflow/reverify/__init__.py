"""Reverify: new rewards for stored rollouts, and the check of stored verdicts."""
