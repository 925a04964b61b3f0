"""The margin of a decision: how often the same rules pick the same action when the tasks are
resampled (a bootstrap over tasks).

Each resample draws as many tasks as the run has, with replacement; tasks that share an
evidence pattern are drawn together as a multinomial over the patterns, so ten thousand
resamples of a million tasks cost what a few hundred patterns cost. Seeded: the same evidence
gives the same margin."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: bootstrap resamples of the tasks
RESAMPLES = 2000
#: the share of resamples the leader must win to be recommended; below it the decision is
#: "undecided between" the leader and the action that wins most of the other resamples
LEVEL = 0.9
SEED = 0


def resampled_winners(
    support: np.ndarray,
    totals: np.ndarray,
    tasks: np.ndarray,
    rule: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> np.ndarray:
    """The rule's winner (an index into the actions, -1 for none) in each resample.

    `support` is patterns x actions (rollouts of one task supporting each action), `totals` the
    evidence rollouts of one task per pattern, `tasks` how many tasks share each pattern; `rule`
    maps (resamples x actions supports, resamples totals) to winners."""
    n = int(tasks.sum())
    if n == 0:
        return np.full(resamples, -1)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, tasks / n, size=resamples)
    return rule(weights @ support, weights @ totals)


def margin(winners: np.ndarray, leader: int) -> float:
    """The share of resamples `leader` wins."""
    return float(np.mean(winners == leader)) if winners.size else 0.0


def challenger(winners: np.ndarray, leader: int, order: Sequence[int]) -> int | None:
    """The action that wins most of the resamples `leader` does not (ties by `order`)."""
    others = winners[(winners != leader) & (winners >= 0)]
    if not others.size:
        return None
    counts = np.bincount(others, minlength=max(order) + 1)
    best = counts.max()
    return next(i for i in order if counts[i] == best)
