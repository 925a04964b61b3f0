"""Rollout collection: turning a config into a plan, and a plan into stored rollouts."""
