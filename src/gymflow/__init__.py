"""gymflow: evaluate LLM policies on verifiable environments.

What an environment author needs is importable from here (`from gymflow import Environment,
ResourcesServer, Task, verifier, Verdict`); the modules behind these names are the package's
inside. They load on first use, so `import gymflow` stays light (a CLI command that needs none of
them does not pay for pydantic, the model client or the verifiers)."""

import importlib
from typing import Any


def _version() -> str:
    """Read on first use: importlib.metadata costs ~30 ms, paid by every `gym` command that
    imports gymflow."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gymflow")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+local"


#: The author's API: name -> (module, attribute in it).
_EXPORTS: dict[str, tuple[str, str]] = {
    # an environment: its manifest, its tasks, its resources server and tools
    "Environment": ("gymflow.environments.base", "Environment"),
    "EnvironmentManifest": ("gymflow.environments.base", "EnvironmentManifest"),
    "Task": ("gymflow.core.tasks", "Task"),
    "ToolCall": ("gymflow.core.tasks", "ToolCall"),
    "ResourcesServer": ("gymflow.environments.resources", "ResourcesServer"),
    "ToolError": ("gymflow.core.protocols", "ToolError"),
    "function_tool": ("gymflow.models.responses", "function_tool"),
    # a verifier: the decorator that registers it, what it reads and what it returns
    "verifier": ("gymflow.verifiers.base", "verifier"),
    "VerifyInput": ("gymflow.verifiers.base", "VerifyInput"),
    "Verdict": ("gymflow.verifiers.base", "Verdict"),
    "VerifierError": ("gymflow.verifiers.base", "VerifierError"),
    "DataField": ("gymflow.verifiers.base", "DataField"),
    "get_verifier": ("gymflow.verifiers.base", "get_verifier"),
    # a harness: `gymflow.harness` is the package, so its decorator is `register_harness` here
    "register_harness": ("gymflow.harness.base", "harness"),
    "Harness": ("gymflow.harness.base", "Harness"),
    "Episode": ("gymflow.harness.base", "Episode"),
    "get_harness": ("gymflow.harness.base", "get_harness"),
    # finding things by name
    "load_environment": ("gymflow.environments.registry", "load_environment"),
    "Registry": ("gymflow.core.registry", "Registry"),
    "RegistryError": ("gymflow.core.registry", "RegistryError"),
    "UnknownName": ("gymflow.core.registry", "UnknownName"),
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = _version()
    else:
        try:
            module, attribute = _EXPORTS[name]
        except KeyError:
            raise AttributeError(f"module 'gymflow' has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "__version__"})
