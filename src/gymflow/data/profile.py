"""A run seen as training data: how pass rates spread over tasks (overall, per tag, per
difficulty), how many tasks are informative (0 < pass rate < 1: the ones a policy-gradient
method learns from), which prompts are near-duplicates of each other, and how many tasks a
selection keeps."""

from __future__ import annotations

from typing import Any

import numpy as np

from gymflow.analysis.frames import frame
from gymflow.analysis.outcomes import check_verifier_version
from gymflow.analysis.results import Number, Result
from gymflow.data.neardup import group_documents, normalised_sql, recall_at
from gymflow.data.select import Filters, SelectionError, select_tasks
from gymflow.store.queries.selections import task_prompts_sql

#: Pass-rate bins: exactly 0, tenths in between (the first open at 0), exactly 1, and tasks with
#: nothing scored.
BINS = (
    "0",
    "(0,0.1)",
    *(f"[{i / 10:g},{(i + 1) / 10:g})" for i in range(1, 10)),
    "1",
    "missing",
)
_BIN_SQL = """CASE WHEN n = 0 THEN 12 WHEN pass_rate = 0 THEN 0 WHEN pass_rate = 1 THEN 11
                   ELSE 1 + least(floor(pass_rate * 10)::INT, 9) END"""
EXCERPT = 160
#: members listed per near-duplicate group (its size counts them all)
MEMBERS = 50


class PassRates(Result):
    """A group of tasks (all, a tag, a difficulty) by pass rate: `informative_share` is of the
    tasks with a score (None when none has one: a task with nothing scored is neither
    informative nor not), `mean_pass_rate` over them, `histogram` task counts per bin of BINS."""

    group: str
    tasks: int
    scored: int
    informative: int
    informative_share: Number | None
    mean_pass_rate: Number | None
    histogram: dict[str, int]


class DuplicateMember(Result):
    task_id: str
    n: int
    c: int
    pass_rate: Number | None
    #: the prompt's first EXCERPT characters
    prompt: str | None


class DuplicateGroup(Result):
    similarity: Number
    tasks: int
    pass_rate_spread: Number | None
    #: the first MEMBERS by task_id
    members: list[DuplicateMember]


class NearDuplicates(Result):
    threshold: Number
    method: str
    precision: Number
    recall_at_threshold: Number
    groups: int
    grouped_tasks: int
    shown: list[DuplicateGroup]


class SelectionSize(Result):
    """How many tasks a selection (`gym data select` with these filters) keeps."""

    filters: dict[str, Any]
    tasks: int
    kept: int
    kept_by_bucket: dict[str, int]


class DataProfile(Result):
    """The run as training data under one verifier version (`data_profile`)."""

    verifier_version: str
    tasks: int
    scored: int
    informative: int
    informative_share: Number | None
    bins: list[str]
    overall: PassRates
    by_tag: list[PassRates]
    by_difficulty: list[PassRates]
    near_duplicates: NearDuplicates
    selection: SelectionSize


def _histograms(con, group_sql: str | None) -> list[PassRates]:
    """Per group (or one group "all"): its tasks by pass rate (`PassRates`)."""
    group = group_sql or "'all'"
    source = (
        "(SELECT *, unnest(CASE WHEN len(coalesce(tags, [])) = 0 THEN ['(none)'] ELSE tags END)"
        " AS tag FROM data_tasks)"
        if group_sql == "tag"
        else "data_tasks"
    )
    rows = frame(
        con,
        f"""
        WITH binned AS (SELECT {group} AS grp, {_BIN_SQL} AS bin, pass_rate FROM {source}),
        per_bin AS (SELECT grp, bin, count(*) AS tasks FROM binned GROUP BY grp, bin)
        SELECT b.grp, t.tasks, t.scored, t.informative, t.mean_pass_rate,
               list(b.tasks ORDER BY b.bin) AS counts, list(b.bin ORDER BY b.bin) AS bins
        FROM per_bin b JOIN (
            SELECT grp, count(*) AS tasks, count(*) FILTER (WHERE bin <> 12) AS scored,
                   count(*) FILTER (WHERE pass_rate > 0 AND pass_rate < 1) AS informative,
                   avg(pass_rate) AS mean_pass_rate
            FROM binned GROUP BY grp
        ) t USING (grp)
        GROUP BY b.grp, t.tasks, t.scored, t.informative, t.mean_pass_rate
        ORDER BY t.tasks DESC, b.grp
        """,
    ).to_dicts()
    out = []
    for row in rows:
        counts = [0] * len(BINS)
        for index, count in zip(row["bins"], row["counts"], strict=True):
            counts[index] = count
        out.append(
            PassRates(
                group=row["grp"],
                tasks=row["tasks"],
                scored=row["scored"],
                informative=row["informative"],
                informative_share=row["informative"] / row["scored"] if row["scored"] else None,
                mean_pass_rate=row["mean_pass_rate"],
                histogram=dict(zip(BINS, counts, strict=True)),
            )
        )
    return out


def near_duplicates(con, *, threshold: float, shown: int, seed: int = 0) -> NearDuplicates:
    """Groups of tasks whose normalised prompts are near-duplicates (see `neardup`), each with
    its tasks' pass rates side by side (the first MEMBERS by task_id). Largest groups first,
    then the widest pass-rate spread.

    Expects `data_tasks` (see `prepare_tasks`)."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE data_prompts AS
        WITH normal AS (
            SELECT *, {normalised_sql("coalesce(prompt, '')")} AS text
            FROM ({task_prompts_sql("data_tasks")})
        ),
        docs AS (SELECT text, (row_number() OVER (ORDER BY text) - 1)::BIGINT AS doc
                 FROM (SELECT DISTINCT text FROM normal))
        SELECT normal.*, docs.doc FROM normal JOIN docs USING (text)
        """
    )
    count = con.execute("SELECT count(DISTINCT doc) FROM data_prompts").fetchone()[0]
    groups = group_documents(
        con,
        "SELECT DISTINCT doc, text FROM data_prompts",
        count,
        threshold=threshold,
        seed=seed,
    )
    con.execute("CREATE OR REPLACE TEMP TABLE data_doc_groups (doc BIGINT, grp BIGINT, sim DOUBLE)")
    if count:
        # As list parameters, not a registered Arrow table: registering makes DuckDB import
        # pandas (0.3-0.8 s of a small run's report).
        con.execute(
            "INSERT INTO data_doc_groups SELECT unnest($1), unnest($2), unnest($3)",
            [
                np.arange(count, dtype=np.int64).tolist(),
                groups.label.astype(np.int64).tolist(),
                groups.similarity[groups.label].astype(np.float64).tolist(),
            ],
        )
    summary = frame(
        con,
        f"""
        WITH grouped AS (
            SELECT g.grp, any_value(g.sim) AS similarity, count(*) AS tasks,
                   max(p.pass_rate) - min(p.pass_rate) AS spread,
                   list({{'task_id': p.task_id, 'n': p.n, 'c': p.c, 'pass_rate': p.pass_rate,
                          'prompt': left(p.prompt, {EXCERPT})}} ORDER BY p.task_id)[1:{MEMBERS}]
                     AS members
            FROM data_prompts p JOIN data_doc_groups g USING (doc)
            GROUP BY g.grp HAVING count(*) > 1
        )
        SELECT *, count(*) OVER () AS groups, sum(tasks) OVER () AS grouped_tasks
        FROM grouped ORDER BY tasks DESC, spread DESC NULLS LAST, grp
        LIMIT {int(shown)}
        """,
    ).to_dicts()
    return NearDuplicates(
        threshold=threshold,
        method="exact Jaccard similarity of word 3-grams of normalised prompts, over the "
        "candidate pairs of MinHash LSH (64 permutations, 16 bands of 4)",
        # Every pair kept is checked exactly; a pair exactly at the threshold is a candidate
        # with this probability (more alike: more often).
        precision=1.0,
        recall_at_threshold=recall_at(threshold),
        groups=summary[0]["groups"] if summary else 0,
        grouped_tasks=int(summary[0]["grouped_tasks"]) if summary else 0,
        shown=[
            DuplicateGroup(
                similarity=row["similarity"],
                tasks=row["tasks"],
                pass_rate_spread=row["spread"],
                members=row["members"],
            )
            for row in summary
        ],
    )


def data_profile(
    con,
    *,
    verifier_version: str | None = None,
    filters: Filters | None = None,
    threshold: float = 0.8,
    groups_shown: int = 20,
) -> DataProfile:
    """The training-data profile of the run in `con` under one verifier version (the newest
    unless given). `filters` (default: the informative band) is the selection whose size is
    reported."""
    if not 0.0 < threshold <= 1.0:
        raise SelectionError(f"--threshold {threshold}: need 0 < threshold <= 1")
    version = check_verifier_version(con, verifier_version)
    # select_tasks leaves `data_tasks`, which every section below reads.
    selection = select_tasks(con, filters or Filters(), verifier_version=version)
    overall = next(iter(_histograms(con, None)), None) or PassRates(
        group="all",
        tasks=0,
        scored=0,
        informative=0,
        informative_share=None,
        mean_pass_rate=None,
        histogram=dict.fromkeys(BINS, 0),
    )
    return DataProfile(
        verifier_version=version,
        tasks=overall.tasks,
        scored=overall.scored,
        informative=overall.informative,
        informative_share=overall.informative_share,
        bins=list(BINS),
        overall=overall,
        by_tag=_histograms(con, "tag"),
        by_difficulty=_histograms(con, "coalesce(difficulty, '(none)')"),
        near_duplicates=near_duplicates(con, threshold=threshold, shown=groups_shown),
        selection=SelectionSize(
            filters=selection.filters.as_dict(),
            tasks=selection.counts["tasks"],
            kept=selection.counts["kept"],
            kept_by_bucket=selection.counts["kept_by_bucket"],
        ),
    )
