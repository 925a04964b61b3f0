"""What gymflow ships: its environments (arithmetic, backoffice, bfcl, humaneval, ifeval, math),
each a folder with its `environment.yaml` beside its code, and its benchmarks
(`benchmarks/*.yaml`): content written against `gymflow.environments`, as a user's own is.

Cut-off: the registry finds these folders by their place (`environments.registry.BUILTIN_DIR`);
no package imports them. Tier 2, above `environments` by use, not by import."""

__tier__ = 2

__all__ = []
