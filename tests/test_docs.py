"""The docs site builds with no warning (no broken link or anchor, no page outside the nav), its
reference holds a page per command with every flag the command's `--help` prints, and the
README stays the short page that points into it: its two commands are the ones CI runs, and
its links lead somewhere."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gymflow.cli import COMMANDS
from tests.conftest import ROOT, gym, gym_in_process
from tests.faults.stores import gym_env

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
#: The README is the first page a newcomer reads: what gymflow is, the two commands, a tour and
#: links. Everything else has a page of its own under docs/.
README_MAX_LINES = 120


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `mkdocs build --strict` writes it (every warning is an error)."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def _text(page: Path) -> str:
    return re.sub(r"<[^>]+>", " ", page.read_text())


def test_the_site_reads_offline(site: Path):
    """No page loads a script, stylesheet or font from elsewhere (mkdocs.yml: `font: false`)."""
    loads = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//", re.I)
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > len(COMMANDS)
    assert not [page.name for page in pages if loads.search(page.read_text())]


def test_every_command_has_a_reference_page_in_the_nav(site: Path):
    index = (site / "reference" / "index.html").read_text()
    for words in COMMANDS:
        page = f"gym-{'-'.join(words)}.html"
        assert (site / "reference" / page).is_file(), page
        assert f'href="{page}"' in index, page


def test_a_command_page_holds_every_flag_its_help_prints(site: Path):
    shown = gym_in_process("eval", "run", "--help", cwd=ROOT, check=True).stdout
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", shown)) - {"--help"}
    page = _text(site / "reference" / "gym-eval-run.html")
    missing = sorted(flag for flag in flags if flag not in page)
    assert len(flags) > 20 and not missing, missing


def test_the_config_reference_lists_every_key(site: Path):
    from gymflow.core.config import EvalConfig, ModelConfig

    page = _text(site / "reference" / "config.html")
    keys = [*EvalConfig.model_fields, *(f"model.{key}" for key in ModelConfig.model_fields)]
    assert not [key for key in keys if key not in page]


def test_the_health_checks_page_lists_every_check_health_runs(site: Path, tmp_path: Path):
    from gymflow.analysis.health import health
    from gymflow.store.db import connect
    from tests.analysis.builder import RunMeta, StoreBuilder

    builder = StoreBuilder(RunMeta(repeats=2))
    builder.task("t0", 7)
    builder.fill("t0", "10")
    builder.write(tmp_path / "run")
    with connect(tmp_path / "run", read_only=True) as con:
        names = list(health(con).checks)
    page = _text(site / "reference" / "health-checks.html")
    assert len(names) > 20 and not [name for name in names if name not in page]


def test_the_api_reference_documents_every_export(site: Path):
    import gymflow

    page = _text(site / "reference" / "api.html")
    names = [name for name in gymflow.__all__ if name != "__version__"]
    assert len(names) > 20
    assert not [name for name in names if name not in page]
    assert "(no docstring)" not in page


def test_the_annotated_pages_quote_the_code(site: Path):
    """Each annotated page shows its component's code (highlighted, so compared without spaces),
    and no marker was left unreplaced."""
    for page, quoted in {
        "environment-source.html": "class BackofficeServer(ResourcesServer):",
        "harness-source.html": "async def tool_loop(",
        "verifier-source.html": "def numeric_match(",
    }.items():
        html = (site / "components" / page).read_text()
        assert "".join(quoted.split()) in "".join(_text(site / "components" / page).split()), page
        assert "<!-- source:" not in html and "<!-- file:" not in html, page


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_the_readme_is_short_and_its_test_command_is_the_one_ci_runs():
    lines = README.splitlines()
    assert len(lines) < README_MAX_LINES, "README.md: put the details in a page under docs/"
    two = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    run, tests = (block.strip() for block in _bash_blocks(two))
    assert run == "pip install -e '.[dev]' && gym demo"
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert tests == ci
    install = (DOCS / "basics" / "install.md").read_text()
    assert run in _bash_blocks(install)[0] and tests in _bash_blocks(install)[1]


def test_the_readme_links_lead_to_pages_that_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    assert not [link for link in local if not (ROOT / link).exists()]


def test_every_variable_gymflow_reads_is_documented():
    """The `GYMFLOW_*` variables the package names, and no other, head a row of the page."""
    source = "\n".join(path.read_text() for path in (ROOT / "src" / "gymflow").rglob("*.py"))
    read = set(re.findall(r"\bGYMFLOW_[A-Z_]+\b", source))
    page_path = DOCS / "reference" / "environment-variables.md"
    page = page_path.read_text()
    documented = set(re.findall(r"^\| `(GYMFLOW_[A-Z_]+)` \|", page, re.M))
    suite = (ROOT / ".ci" / "run").read_text()
    undocumented = sorted(read - documented)
    assert not undocumented, f"{undocumented}: add a row for each to {page_path}"
    assert not {name for name in documented - read if name not in suite}


def _commands(block: str) -> list[str]:
    """The command lines of a bash block, comments cut."""
    lines = (line.split("  #", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_the_tour_runs_as_written(tmp_path: Path, prefect_api: str):
    """Every command of the tutorial, in order, in an empty folder, as a new user types them;
    the README's five-minute tour is a part of it, and what the tutorial says they print holds."""
    tutorial = (DOCS / "basics" / "tutorial.md").read_text()
    steps = [line for block in _bash_blocks(tutorial) for line in _commands(block)]
    tour = README.split("## A five-minute tour", 1)[1]
    assert set(_commands(_bash_blocks(tour)[0])) <= set(steps)
    said = {}
    for line in steps:
        words = shlex.split(line)
        assert words[0] == "gym", line
        result = gym(*words[1:], cwd=tmp_path, env=gym_env(prefect_api), check=True)
        said[line] = " ".join(result.stdout.split())
    assert (tmp_path / "runs/demo/report.html").is_file()
    # the headline the tutorial shows is the one `gym demo` prints (`...` elides a part)
    (shown,) = re.findall(r"```text\n(SIMULATED.*?)```", tutorial, re.S)
    pieces = [p for line in shown.splitlines() for p in line.split("...") if p.strip()]
    assert not [p for p in pieces if " ".join(p.split()) not in said["gym demo"]]
    compared = said["gym eval profile runs/demo --compare runs/seed1"]
    assert "differs: sampling.seed: 0 vs 1" in compared
    # "the interval holds 0, so the difference is not shown to be real"
    low, high = re.search(r"A - B = \S+ \(SE \S+, 95% CI (\S+)% – (\S+)%", compared).groups()
    assert float(low) <= 0 <= float(high), compared
    assert (tmp_path / "runs/demo/compare.html").is_file()
    reverified = said["gym eval reverify runs/seed1 --set abs_tol=5"]
    assert "before: pass@1" in reverified and "after: pass@1" in reverified


#: The shipped dataset a docs example names, copied beside the example when it is checked.
SHIPPED_BENCHMARKS = ROOT / "src" / "gymflow" / "builtin" / "benchmarks"


def test_every_config_study_and_benchmark_example_is_valid(tmp_path: Path):
    """Each YAML example in the docs passes the command the docs say reads it: an eval config
    `gym env validate`, a study `gym study run --check`, a benchmark definition (beside a copy
    of the shipped data it names) `gym env validate benchmarks/NAME.yaml`. A fragment (one
    section of a config) and a benchmark that needs NeMo Gym's server are not whole examples."""
    examples = [
        (page, yaml.safe_load(block))
        for page in sorted(DOCS.rglob("*.md"))
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)
    ]
    checked = []
    for number, (page, example) in enumerate(examples):
        folder = tmp_path / str(number)
        (folder / "benchmarks").mkdir(parents=True)
        if "baseline" in example:
            target, args = "example.yaml", ["study", "run", "example.yaml", "--check"]
        elif "dataset" in example and example["verifier"]["name"] != "nemo_gym":
            # a new name: the shipped benchmark of the same name would be checked instead
            example["name"] = f"docs-example-{number}"
            data = example["dataset"]["path"]
            (folder / "benchmarks" / data).write_bytes((SHIPPED_BENCHMARKS / data).read_bytes())
            target = f"benchmarks/{example['name']}.yaml"
            args = ["env", "validate", target]
        elif "benchmark" in example:
            target, args = "example.yaml", ["env", "validate", "example.yaml"]
        else:
            continue
        (folder / target).write_text(yaml.safe_dump(example))
        result = gym_in_process(*args, cwd=folder)  # checks only: no process needed
        assert result.returncode == 0, (page.name, result.stdout, result.stderr)
        checked.append(page.name)
    assert {"options.md", "studies.md", "benchmarks.md"} <= set(checked), checked
