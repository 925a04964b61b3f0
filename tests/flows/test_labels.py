"""Which flow run names Prefect made up (and gymflow replaces with the run's own) and which a user
gave (kept): decided by Prefect's own name generators, not by a name's shape."""

from __future__ import annotations

import pytest
from prefect.utilities.names import generate_slug

from gymflow.flows.labels import prefect_named


def test_every_name_the_server_makes_up_is_prefects():
    assert all(prefect_named(generate_slug(2)) for _ in range(500))


@pytest.mark.parametrize(
    "name",
    # the UI's Run Name field pre-fills a Greek letter (maybe numbered), a constellation, star or
    # place (some with a dash), and maybe a word
    [
        "theta4-crick",
        "iota376-anfalas-c",
        "alpha3-centauri-void",
        "beta-canis-majoris",
        "omega12-vega-nebula",
    ],
)
def test_the_names_the_ui_prefills_are_prefects(name):
    assert prefect_named(name)


@pytest.mark.parametrize(
    "name",
    ["baseline-run", "beta-run", "alpha-centauri-run", "checkpoint 2000 (typed)", "nightly"],
)
def test_a_typed_name_is_the_users_whatever_its_shape(name):
    assert not prefect_named(name)
