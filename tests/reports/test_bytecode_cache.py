"""The report templates' bytecode cache: used when a template is unchanged, compiled again when
it was edited, and never the reason a report fails."""

from __future__ import annotations

import shutil
from importlib.resources import as_file, files
from pathlib import Path

import pytest
from jinja2 import Environment, FileSystemLoader

from gymflow.reports.bytecode_cache import bytecode_cache, cache_root
from gymflow.reports.render import environment

PAGE = {
    "csp": "default-src 'none'",
    "gymflow_version": "test",
    "style": "",
    "script": "",
    "generated_at": "now",
}


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    """A copy of the report templates, free to edit."""
    with as_file(files("gymflow.reports") / "templates") as source:
        return Path(shutil.copytree(source, tmp_path / "templates"))


def _never_compile(env: Environment) -> Environment:
    def compile_called(*args, **kwargs):
        raise AssertionError("the template was compiled, not loaded from the cache")

    env.compile = compile_called  # type: ignore[method-assign]
    return env


def test_unchanged_templates_load_from_the_cache_and_an_edit_is_compiled_again(
    templates: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = environment(FileSystemLoader(templates), cache).get_template("base.html.j2")
    assert list(cache.glob("*.cache")), "nothing was written to the cache"

    # A new process (a fresh environment) loads the unchanged template's bytecode.
    again = _never_compile(environment(FileSystemLoader(templates), cache))
    assert again.get_template("base.html.j2").render(PAGE) == first.render(PAGE)

    base = templates / "base.html.j2"
    base.write_text(base.read_text().replace("<main>", "<main><p>edited</p>"))
    edited = environment(FileSystemLoader(templates), cache).get_template("base.html.j2")
    assert "<main><p>edited</p>" in edited.render(PAGE)
    assert "edited" not in first.render(PAGE)
    # ... and the edited bytecode replaced the old entry: the next process loads it.
    cached = _never_compile(environment(FileSystemLoader(templates), cache))
    assert "<main><p>edited</p>" in cached.get_template("base.html.j2").render(PAGE)


def test_damaged_entries_are_compiled_again(templates: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    expected = environment(FileSystemLoader(templates), cache).get_template("run.html.j2")
    for entry in cache.glob("*.cache"):
        entry.write_bytes(entry.read_bytes()[:40])  # a truncated write
    rebuilt = environment(FileSystemLoader(templates), cache).get_template("run.html.j2")
    assert rebuilt.root_render_func.__code__.co_code == expected.root_render_func.__code__.co_code


def test_a_folder_that_cannot_be_used_means_no_cache_and_a_working_report(
    templates: Path, tmp_path: Path
) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    assert bytecode_cache("v", a_file) is None
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # others could plant bytecode: not used
    assert bytecode_cache("v", shared) is None

    env = environment(FileSystemLoader(templates), a_file)
    assert env.bytecode_cache is None
    assert "<main>" in env.get_template("base.html.j2").render(PAGE)


def test_a_cache_that_cannot_be_written_still_renders(templates: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = environment(FileSystemLoader(templates), cache)
    shutil.rmtree(cache)  # gone between start-up and the report: nowhere to write
    assert "<main>" in env.get_template("base.html.j2").render(PAGE)


def test_no_home_folder_means_no_cache(monkeypatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert bytecode_cache("v") is None


def test_the_cache_lives_in_the_users_cache_folder(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "gymflow" / "jinja"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "gymflow" / "jinja"
