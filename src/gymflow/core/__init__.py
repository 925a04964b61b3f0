"""The ground floor: the types and services every layer shares. Tasks, records and statuses;
the config models (`config`), the rules that keep credentials out of them (`credentials`) and
the errors every package raises (`errors`); the one registry behind verifiers, harnesses and
environments (`registry`); bounded YAML and Jinja, and the one bounded reader of a file gymflow
does not own (`bounded_files`); files written aside and renamed into place (`written`); progress
listeners, processes, the user's folders.

Cut-off: imports nothing of gymflow's outside `core`; pydantic, PyYAML and Jinja only. Tier 0."""

# pyright: reportUnsupportedDunderAll=false
# (`__all__` names the public modules without importing them: see pyproject.toml)

__tier__ = 0

__all__ = [
    "atif",
    "bounded_files",
    "bounded_jinja",
    "bounded_yaml",
    "config",
    "credentials",
    "errors",
    "json_text",
    "layout",
    "processes",
    "progress",
    "prompts",
    "protocols",
    "records",
    "registry",
    "same_text",
    "statuses",
    "tasks",
    "trees",
    "user_folders",
    "written",
]
