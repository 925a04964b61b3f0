"""Finding what to evaluate: a catalog of environments and benchmarks, ranked against a query.

Ranking is a weighted match of the query's words against each entry's fields. A whole-phrase
match on a field outweighs scattered word matches ("function calling" is the `function-calling`
domain, not every description that mentions a function), and a field that names the thing (name,
domain, tags) outweighs the description. A benchmark inherits its environment's domain and tags at
a discount, so a query finds the environment first and its benchmarks right after."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gymflow.environments.base import EnvironmentManifest
from gymflow.environments.registry import (
    Benchmark,
    RegistryError,
    benchmark_files,
    environment_sources,
    load_benchmark,
)

_WORD = re.compile(r"[a-z0-9]+")

#: (phrase weight, word weight) per field: what a field is worth when it matches.
_WEIGHTS: dict[str, tuple[float, float]] = {
    "name": (60.0, 12.0),
    "domain": (40.0, 8.0),
    "tags": (30.0, 6.0),
    "tools": (20.0, 4.0),
    "environment": (30.0, 6.0),
    "description": (10.0, 2.0),
}
#: A benchmark's inherited environment fields count this much of the environment's own score.
_INHERITED = 0.8


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _word_matches(query_word: str, field_words: list[str]) -> bool:
    stem = _stem(query_word)
    return any(
        w == query_word or _stem(w) == stem or (len(query_word) >= 4 and w.startswith(query_word))
        for w in field_words
    )


def _phrase_in(phrase: list[str], field_words: list[str]) -> bool:
    n = len(phrase)
    return any(field_words[i : i + n] == phrase for i in range(len(field_words) - n + 1))


@dataclass(frozen=True)
class CatalogEntry:
    kind: Literal["environment", "benchmark"]
    name: str
    description: str
    domain: str
    tags: tuple[str, ...]
    environment: str
    path: Path
    #: The environment's tags, for benchmarks (their own tags are in `tags`).
    inherited_tags: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchHit:
    entry: CatalogEntry
    score: float
    matched: tuple[str, ...]

    def as_json(self) -> dict[str, object]:
        e = self.entry
        return {
            "kind": e.kind,
            "name": e.name,
            "score": round(self.score, 2),
            "matched": list(self.matched),
            "domain": e.domain,
            "environment": e.environment,
            "tags": list(e.tags),
            "description": e.description,
            "path": str(e.path),
        }


@dataclass
class Catalog:
    environments: list[CatalogEntry] = field(default_factory=list)
    benchmarks: list[CatalogEntry] = field(default_factory=list)
    #: Benchmark files that do not load: they are reported, not hidden and not fatal.
    problems: list[str] = field(default_factory=list)

    def entries(self) -> list[CatalogEntry]:
        return [*self.environments, *self.benchmarks]


def environment_entry(manifest: EnvironmentManifest, folder: Path) -> CatalogEntry:
    return CatalogEntry(
        kind="environment",
        name=manifest.name,
        description=" ".join(manifest.description.split()),
        domain=manifest.domain,
        tags=tuple(manifest.tags),
        environment=manifest.name,
        path=folder,
        tools=tuple(manifest.tools),
    )


def benchmark_entry(
    benchmark: Benchmark, path: Path, env: EnvironmentManifest | None
) -> CatalogEntry:
    return CatalogEntry(
        kind="benchmark",
        name=benchmark.name,
        description=" ".join(benchmark.description.split()),
        domain=env.domain if env else "",
        tags=tuple(benchmark.tags),
        environment=benchmark.environment,
        path=path,
        inherited_tags=tuple(env.tags) if env else (),
    )


def _own_manifest(benchmark: Benchmark, path: Path) -> EnvironmentManifest | None:
    """The manifest of the environment a dataset or workspace benchmark defines."""
    from gymflow.environments.dataset.environment import dataset_manifest
    from gymflow.environments.workspace.environment import WorkspaceEnvironment

    try:
        if benchmark.workspace is not None:
            return WorkspaceEnvironment.from_benchmark(benchmark, path).manifest
        return dataset_manifest(benchmark)
    except ValueError:  # named when the benchmark is used or validated
        return None


def load_catalog() -> Catalog:
    catalog = Catalog()
    sources = environment_sources()
    for name in sorted(sources):
        catalog.environments.append(environment_entry(sources[name].manifest, sources[name].folder))
    for name, path in sorted(benchmark_files().items()):
        try:
            benchmark = load_benchmark(name)
        except RegistryError as exc:
            catalog.problems.append(str(exc))
            continue
        source = sources.get(benchmark.environment)
        if benchmark.dataset is not None or benchmark.workspace is not None:  # its own
            catalog.benchmarks.append(
                benchmark_entry(benchmark, path, _own_manifest(benchmark, path))
            )
            continue
        if source is None:
            catalog.problems.append(
                f"{path}: environment {benchmark.environment!r} is not installed "
                f"(known: {', '.join(sorted(sources))})"
            )
        catalog.benchmarks.append(
            benchmark_entry(benchmark, path, source.manifest if source else None)
        )
    return catalog


def _field_score(query: list[str], field_name: str, values: list[str]) -> tuple[float, bool]:
    phrase_weight, word_weight = _WEIGHTS[field_name]
    best = 0.0
    for value in values:
        field_words = words(value)
        if not field_words:
            continue
        if field_words == query:
            score = phrase_weight * 1.5  # the field is exactly the query
        elif len(query) > 1 and _phrase_in(query, field_words):
            score = phrase_weight
        else:
            hits = sum(_word_matches(q, field_words) for q in query)
            score = word_weight * hits * (hits / len(query))  # favour matching every word
        best = max(best, score)
    return best, best > 0


def score_entry(query: list[str], entry: CatalogEntry) -> tuple[float, tuple[str, ...]]:
    fields: dict[str, list[str]] = {"name": [entry.name], "description": [entry.description]}
    # A benchmark's tags and domain are about its environment, so they count at a discount.
    discounted: dict[str, list[str]] = {}
    if entry.kind == "environment":
        fields["domain"] = [entry.domain]
        fields["tags"] = list(entry.tags)
        fields["tools"] = list(entry.tools)
    else:
        fields["environment"] = [entry.environment]
        discounted["domain"] = [entry.domain]
        discounted["tags"] = list(dict.fromkeys([*entry.tags, *entry.inherited_tags]))
    total, matched = 0.0, []
    for weight, group in ((1.0, fields), (_INHERITED, discounted)):
        for field_name, values in group.items():
            score, hit = _field_score(query, field_name, values)
            total += weight * score
            if hit:
                matched.append(field_name)
    return total, tuple(matched)


def search(query: str, catalog: Catalog | None = None) -> list[SearchHit]:
    """Entries matching `query`, best first; ties go to environments, then by name."""
    query_words = words(query)
    if not query_words:
        return []
    catalog = catalog or load_catalog()
    hits = []
    for entry in catalog.entries():
        score, matched = score_entry(query_words, entry)
        if score > 0:
            hits.append(SearchHit(entry, score, matched))
    hits.sort(key=lambda h: (-h.score, h.entry.kind != "environment", h.entry.name))
    return hits
