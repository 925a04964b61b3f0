"""A study variant that changes only verifier parameters is judged after the baseline's
inference: a parameter the verifier refuses was found only then, after paying for the baseline.
It is refused when the study is resolved (`gym study run --check` names it)."""

from __future__ import annotations

import pytest

from gymflow.core.config import ConfigError
from gymflow.study.spec import StudySpec, resolve_study

BASE = {"benchmark": "arithmetic-smoke", "repeats": 2}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"nonexistent": 1}, "nonexistent: not a parameter of numeric_match (its parameters: "),
        ({"rel_tol": float("inf")}, "rel_tol: inf is not a finite number"),
    ],
)
def test_a_verifier_only_variant_with_refused_parameters_stops_the_study_first(
    params: dict, expected: str
) -> None:
    spec = StudySpec(
        name="s",
        out="runs/s",
        baseline=BASE,
        variants=[{"name": "bad", "set": {"verifier_params": params}}],
    )
    with pytest.raises(ConfigError) as refused:
        resolve_study(spec, "study.yaml")
    assert "study.yaml: variant 'bad'" in str(refused.value)
    assert expected in str(refused.value)


def test_a_verifier_only_variant_with_good_parameters_is_a_reverify() -> None:
    spec = StudySpec(
        name="s",
        out="runs/s",
        baseline=BASE,
        variants=[{"name": "loose", "set": {"verifier_params": {"abs_tol": 1.5}}}],
    )
    (arm,) = resolve_study(spec, "study.yaml").variants
    assert arm.reverify_only
