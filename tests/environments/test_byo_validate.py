"""Bring your own data, checked as a user checks it: `gym env validate` on the benchmark file
itself, a repeated id named by the file's lines, an empty question refused, and a folder written
by the `datasets` package's `save_to_disk` read (one split) or refused naming its splits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import gym

BENCHMARK = "name: {name}\ndataset: {{path: {path}, fields: {{id: id}}}}\n" + (
    'verifier: {{name: numeric_match}}\nprompt_template: "{{{{ question }}}}"\n'
)


def _benchmark(root: Path, name: str, path: str, rows: str | None = None) -> Path:
    folder = root / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        (folder / path).write_text(rows)
    (folder / f"{name}.yaml").write_text(BENCHMARK.format(name=name, path=path))
    return folder / f"{name}.yaml"


def _validate(path: Path) -> tuple[int, str]:
    result = gym(
        "env", "validate", str(path.relative_to(path.parent.parent)), cwd=path.parent.parent
    )
    return result.returncode, " ".join(result.stdout.split())


def test_a_benchmark_file_is_checked_as_the_config_that_runs_it(tmp_path: Path):
    rows = '{"id": "a", "question": "1+1?", "answer": 2}\n'
    code, said = _validate(_benchmark(tmp_path, "mine", "mine.jsonl", rows))
    assert code == 0, said
    assert "a benchmark definition; checked as the config `benchmark: mine`" in said
    assert "Extra inputs" not in said and said.endswith("benchmarks/mine.yaml: valid")


def test_a_repeated_id_is_named_by_the_files_lines(tmp_path: Path):
    rows = "".join(
        f'{{"id": "{i}", "question": "q{n}", "answer": {n}}}\n' for n, i in enumerate("aba")
    )
    code, said = _validate(_benchmark(tmp_path, "dup", "dup.jsonl", rows))
    assert code == 1
    assert "dup.jsonl: line 3: task_id 'a' repeats line 1" in said, said


def test_an_empty_csv_question_fails_validation(tmp_path: Path):
    code, said = _validate(
        _benchmark(tmp_path, "q", "q.csv", "id,question,answer\nx,,3\ny,1+2?,3\n")
    )
    assert code == 1
    assert "(x): prompt: renders empty" in said, said


def test_a_save_to_disk_folder_is_read_and_a_dataset_dict_names_its_splits(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict(
        {"id": ["a", "b"], "question": ["1+1?", "2+2?"], "answer": [2, 4]}
    )
    rows.save_to_disk(str(tmp_path / "benchmarks" / "saved"))
    datasets.DatasetDict({"train": rows, "test": rows}).save_to_disk(
        str(tmp_path / "benchmarks" / "splits")
    )
    code, said = _validate(_benchmark(tmp_path, "saved", "saved"))
    assert code == 0, said
    assert "saved: 2 rows" in said and "first row (row 0) renders as '1+1?'" in said
    code, said = _validate(_benchmark(tmp_path, "splits", "splits"))
    assert code == 1
    assert "a DatasetDict saved with save_to_disk: set dataset.path to one split's folder" in said
    assert "(splits/test, splits/train)" in said
