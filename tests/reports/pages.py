"""Reading a rendered report back: the numbers it shows, and the markup it contains."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path


@dataclass
class Page:
    fields: dict[str, str] = field(default_factory=dict)  # data-field -> data-value
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    text: str = ""
    scripts: int = 0


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.page.tags.append((tag, values))
        if tag == "script":
            self.page.scripts += 1
        if "data-field" in values:
            self.page.fields[values["data-field"] or ""] = values.get("data-value") or ""

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def read(path: Path) -> Page:
    parser = _Parser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    parser.page.text = "".join(parser.chunks)
    return parser.page


def number(page: Page, name: str) -> float | None:
    raw = page.fields[name]
    return None if raw in ("None", "") else float(raw)


def pair(page: Page, name: str) -> list[float] | None:
    return json.loads(page.fields[name])
