"""The back office of a small shop: a multi-turn, stateful tool environment."""
