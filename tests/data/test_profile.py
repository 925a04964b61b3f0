"""`gym data profile`: pass-rate histograms, the informative share and near-duplicate prompts
on a run whose pass rates and prompts are known; and MinHash itself against exact Jaccard."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gymflow.data.neardup import components, group_documents, recall_at, signatures
from tests.analysis.builder import RunMeta, StoreBuilder
from tests.conftest import gym_in_process

APPLES = "Tom has 3 apples and buys 4 more apples at the market today. How many apples now?"
PROMPTS = {
    "apples": APPLES,
    "apples-copy": "  tom HAS 3 apples, and buys 4 more apples at the market today -- "
    "how many apples now",
    "apples-pears": APPLES.replace("market", "shop"),
    "train": "A train leaves at noon at 60 km/h; how far has it gone by 3 pm?",
}
# task: (outcomes, tags, difficulty)
TASKS = {
    "apples": ("1111", ("word",), "easy"),
    "apples-copy": ("0000", ("word",), "easy"),
    "apples-pears": ("1100", ("word", "shop"), "medium"),
    "train": ("1000", (), None),
    "unscored": ("--", ("word",), "hard"),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = StoreBuilder(RunMeta(repeats=4))
    for i, (task_id, (outcomes, tags, difficulty)) in enumerate(TASKS.items()):
        prompt = PROMPTS.get(task_id)  # sealed with the store: `data profile` refuses an edit
        b.task(task_id, 10 + i, tags=tags, difficulty=difficulty, prompt=prompt)
        b.fill(task_id, outcomes)
    return b.write(tmp_path_factory.mktemp("profile") / "run")


def _profile(run: Path, *args: str) -> dict:
    """The profile's JSON, in-process: a read of the store (the text test below runs `gym`)."""
    result = gym_in_process("data", "profile", str(run), "--json", *args, cwd=run.parent)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _nonzero(entry: dict) -> dict:
    return {b: n for b, n in entry["histogram"].items() if n}


def test_histograms_and_informative_share(run: Path) -> None:
    p = _profile(run)
    # Changed on purpose (issue 30): the share is of the 4 tasks with a score, not of all 5.
    assert p["tasks"] == 5 and p["informative"] == 2 and p["informative_share"] == 2 / 4
    assert _nonzero(p["overall"]) == {"0": 1, "[0.2,0.3)": 1, "[0.5,0.6)": 1, "1": 1, "missing": 1}
    by_tag = {g["group"]: g for g in p["by_tag"]}
    assert set(by_tag) == {"word", "shop", "(none)"}
    assert by_tag["word"]["tasks"] == 4 and by_tag["word"]["informative"] == 1
    assert by_tag["word"]["mean_pass_rate"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert _nonzero(by_tag["(none)"]) == {"[0.2,0.3)": 1}
    by_difficulty = {g["group"]: _nonzero(g) for g in p["by_difficulty"]}
    assert by_difficulty == {
        "easy": {"0": 1, "1": 1},
        "medium": {"[0.5,0.6)": 1},
        "hard": {"missing": 1},
        "(none)": {"[0.2,0.3)": 1},
    }
    assert p["selection"]["kept"] == 2 and p["selection"]["tasks"] == 5


def test_selection_size_follows_the_filters(run: Path) -> None:
    assert _profile(run, "--tag", "word", "--pass-rate", "[0,1]")["selection"]["kept"] == 3
    assert _profile(run, "--bucket", "missing")["selection"]["kept"] == 1


def test_near_duplicates_grouped_with_their_pass_rates(run: Path) -> None:
    loose = _profile(run, "--threshold", "0.4")["near_duplicates"]
    assert loose["groups"] == 1 and loose["grouped_tasks"] == 3
    (group,) = loose["shown"]
    assert {m["task_id"]: m["pass_rate"] for m in group["members"]} == {
        "apples": 1.0,
        "apples-copy": 0.0,
        "apples-pears": 0.5,
    }
    assert group["pass_rate_spread"] == 1.0
    assert 0.4 <= group["similarity"] < 1.0
    # only the copy that normalises to the same text stays at a strict threshold
    strict = _profile(run, "--threshold", "0.95")["near_duplicates"]
    (group,) = strict["shown"]
    assert [m["task_id"] for m in group["members"]] == ["apples", "apples-copy"]
    assert group["similarity"] == 1.0


def test_profile_text_and_bad_threshold(run: Path) -> None:
    result = gym_in_process("data", "profile", str(run), "--threshold", "0.4", cwd=run.parent)
    assert result.returncode == 0, result.stderr
    assert "2 informative" in result.stdout and "1 groups, 3 tasks" in result.stdout
    bad = gym_in_process("data", "profile", str(run), "--threshold", "0", cwd=run.parent)
    assert bad.returncode == 1 and "--threshold 0.0: need 0 < threshold <= 1" in bad.stderr


def test_a_run_without_tasks_profiles_as_empty(tmp_path: Path) -> None:
    run = StoreBuilder(RunMeta()).write(tmp_path / "empty")
    p = _profile(run)
    assert (p["tasks"], p["informative"], p["informative_share"]) == (0, 0, None)
    assert p["by_tag"] == [] and p["near_duplicates"]["groups"] == 0
    assert p["selection"]["kept"] == 0


def test_minhash_estimates_jaccard() -> None:
    rng = np.random.default_rng(0)
    universe = rng.integers(0, 2**63, size=400, dtype=np.uint64)
    sets = [universe[:200], universe[:200], universe[50:250], universe[200:400]]
    doc = np.concatenate([np.full(len(s), i) for i, s in enumerate(sets)])
    sig = signatures(doc, np.concatenate(sets), len(sets))
    estimate = lambda i, j: (sig[i] == sig[j]).mean()  # noqa: E731
    assert estimate(0, 1) == 1.0
    assert estimate(0, 2) == pytest.approx(150 / 250, abs=0.15)
    assert estimate(0, 3) < 0.1


def test_components_follow_chains() -> None:
    edges = np.array([[3, 4], [0, 1], [1, 2], [2, 3]])
    assert components(6, edges).tolist() == [0, 0, 0, 0, 0, 5]
    assert components(3, np.empty((0, 2), dtype=np.int64)).tolist() == [0, 1, 2]


def _brute_jaccard(a: str, b: str) -> float:
    def shingles(text: str) -> set[str]:
        w = text.split()
        return {text} if len(w) <= 3 else {" ".join(w[i : i + 3]) for i in range(len(w) - 2)}

    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y)


def test_near_duplicates_are_confirmed_on_exact_jaccard() -> None:
    """Groups are the components of the pairs whose exact Jaccard (brute force here) reaches
    the threshold, and each group's similarity is the exact one of its weakest kept pair."""
    import itertools

    import duckdb

    rng = np.random.default_rng(4)
    vocabulary = [f"w{i}" for i in range(300)]
    texts = []
    for _ in range(12):
        base = list(rng.choice(vocabulary, size=40))
        texts.append(" ".join(base))
        for changes in (1, 2, 4, 8):  # similarities from about 0.9 down to about 0.5
            edited = list(base)
            for position in rng.choice(40, size=changes, replace=False):
                edited[position] = str(rng.choice(vocabulary))
            texts.append(" ".join(edited))
    texts = sorted(set(texts))
    threshold = 0.7
    con = duckdb.connect()
    con.execute("CREATE TABLE docs AS SELECT unnest($1) AS doc, unnest($2) AS text",
                [list(range(len(texts))), texts])  # fmt: skip
    found = group_documents(con, "SELECT doc, text FROM docs", len(texts), threshold=threshold)
    exact = {
        (i, j): _brute_jaccard(texts[i], texts[j])
        for i, j in itertools.combinations(range(len(texts)), 2)
    }
    kept = np.array([pair for pair, value in exact.items() if value >= threshold])
    assert 0.7 <= min(v for v in exact.values() if v >= threshold) < 0.8  # the cut is exercised
    assert any(0.5 < v < threshold for v in exact.values())
    assert found.label.tolist() == components(len(texts), kept).tolist()
    for group in set(found.label.tolist()):
        joined = [exact[tuple(p)] for p in kept.tolist() if found.label[p[0]] == group]
        assert found.similarity[group] == pytest.approx(min(joined, default=1.0))
    assert recall_at(0.8) == pytest.approx(1 - (1 - 0.8**4) ** 16)
