"""`gym eval run`'s config flags are derived from the config model (`cli/config_flags.py`): each
names a real field, takes its type, lists its choices and says which key it sets; a flag sets
exactly that key, and a bad value is named by its flag."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from gymflow.cli.config_flags import FLAGS, field_of, flag_for, with_config_flags
from tests.conftest import gym


def test_every_flag_names_a_config_field() -> None:
    for key in FLAGS.values():
        assert field_of(key).description, key


def test_a_flag_takes_its_fields_type_and_choices() -> None:
    seen: dict = {}
    app = typer.Typer()

    @app.command()
    @with_config_flags
    def run(**flags) -> None:
        seen.update(flags)

    runner = CliRunner()
    done = runner.invoke(app, ["--model-kind", "completions", "--chat-template", "gemma",
                               "--max-output-tokens", "7", "--temperature", "0.5"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert seen["model_kind"] == "completions" and seen["chat_template"] == "gemma"
    assert seen["max_output_tokens"] == 7 and seen["temperature"] == 0.5
    assert seen["benchmark"] is None
    refused = runner.invoke(app, ["--max-output-tokens", "many"], terminal_width=200)
    assert refused.exit_code == 2 and "--max-output-tokens" in refused.output
    boxed = runner.invoke(app, ["--help"]).output
    help_text = " ".join(boxed.replace("│", " ").split())  # rich wraps it in a box
    # a Literal's values come from the model, so a new one reaches the help unasked
    for choice in ("plain", "chatml", "gemma", "alpaca"):
        assert choice in help_text
    assert "sets model.chat_template" in help_text


def test_flag_names_read_back_from_keys() -> None:
    assert flag_for("model.base_url") == "--model-url"
    assert flag_for("sampling.seed") == "--seed"
    assert flag_for("shard") == "--shard"


def test_a_bad_value_is_named_by_its_flag(tmp_path) -> None:
    done = gym("eval", "run", "--benchmark", "arithmetic-smoke", "--model-kind", "completions",
               "--model-url", "http://127.0.0.1:9/v1", "--out", "run", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # bad input
    assert "chat_template is required" in done.stderr
    assert not (tmp_path / "run").exists()
