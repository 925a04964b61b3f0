"""The framework a user extends: an environment (`base`, its manifest in `manifest`), its
resources server (`resources`) served over ASGI (`asgi`) or reached remotely (`remote`),
benchmarks (`benchmark`) and finding them by name (`registry`, `search`), scaffolding, required
packages, dataset benchmarks (`dataset`) and NeMo Gym's servers (`nemo_gym`).

Cut-off: the environments gymflow ships live in `gymflow.builtin`, found by the registry as a
folder, never imported here. Tier 2."""

__tier__ = 2

__all__ = [
    "asgi",
    "base",
    "benchmark",
    "dataset",
    "entrypoint",
    "manifest",
    "nemo_gym",
    "registry",
    "remote",
    "requirements",
    "resources",
    "scaffold",
    "search",
    "verifier_ref",
]
