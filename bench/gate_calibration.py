"""Operating characteristics of the regression gate at the nightly's size, on simulated nights.

A benchmark of `--tasks` tasks, each with its own true pass probability (drawn once per
simulated month from Uniform(0.1, 0.95)), runs `--repeats` times a task every night; the pinned
baseline is one such run made before the month. A stable month keeps every probability; a drop
lowers each by 2, 5 or 10 points from the first night on; a drift lowers them by 1 point a night
for 10 nights (then stays 10 points down). Each night is judged with the gate's own functions
(`paired_t` for the statistic, `gate.sequence` for the CUSUM and the single-night limit, the
margin as `gym runs gate` applies it), and, for comparison, with the rule gymflow used before
(a 95% CI of the paired difference below 0 and a drop beyond the margin), against the night
before and against the pinned baseline.

Printed: the share of stable months with at least one false alarm and false alarms per month;
the share of months in which each drop is caught on the first night, within 7 and within 30
nights; and the drift caught within 10 and within 30 nights. Seeded: the same arguments print
the same table.

    python bench/gate_calibration.py              # 1,000 months a scenario, ~3 min
    python bench/gate_calibration.py --tiny       # a few months: checks that it runs
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from gymflow.analysis.paired import paired_t
from gymflow.history.gate import ALLOWANCE, LIMIT, THRESHOLD, sequence

NIGHTS = 30
MARGIN = 0.02


def _scenarios() -> dict[str, Callable[[int], float]]:
    """name -> the drop on night t (1-based), in pass-rate points as a fraction."""
    return {
        "stable": lambda t: 0.0,
        "2-point drop": lambda t: 0.02,
        "5-point drop": lambda t: 0.05,
        "10-point drop": lambda t: 0.10,
        "drift 1 point a night for 10 nights": lambda t: 0.01 * min(t, 10),
    }


def simulate_month(
    rng: np.random.Generator, tasks: int, repeats: int, drop: Callable[[int], float]
) -> dict[str, list[bool]]:
    """Which nights each rule alarms on, over one month."""
    p = rng.uniform(0.1, 0.95, size=tasks)
    rates = [rng.binomial(repeats, p) / repeats]  # the pinned baseline, night 0
    for night in range(1, NIGHTS + 1):
        rates.append(rng.binomial(repeats, np.clip(p - drop(night), 0, 1)) / repeats)
    base = [paired_t(rates[n] - rates[0]) for n in range(1, NIGHTS + 1)]
    prev = [paired_t(rates[n] - rates[n - 1]) for n in range(1, NIGHTS + 1)]

    def old(test) -> bool:
        return test.interval.bounds[1] < 0 and test.difference < -MARGIN

    statistics = [t.difference / t.stderr for t in base]
    return {
        "gate (CUSUM + limit vs pinned baseline)": [
            alarmed and t.difference < -MARGIN
            for (_, alarmed), t in zip(sequence(statistics), base, strict=True)
        ],
        "old rule vs the night before": [old(t) for t in prev],
        "old rule vs pinned baseline": [old(t) for t in base],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--months", type=int, default=1000, help="simulated months a scenario")
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--tiny", action="store_true", help="a few months, to check it runs")
    args = parser.parse_args()
    months = 4 if args.tiny else args.months
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(
        f"Regression gate at {args.tasks} tasks x {args.repeats} repeats, {NIGHTS}-night months, "
        f"{months:,} seeded months a scenario (seed {args.seed}); CUSUM allowance "
        f"{ALLOWANCE:g} SE, threshold {THRESHOLD:g}, single-night limit {LIMIT:g} SE, margin "
        f"{100 * MARGIN:.0f} points"
    )
    print(f"Monte-Carlo SE of a share near 5%: {100 * math.sqrt(0.05 * 0.95 / months):.1f} points")
    results: dict[str, dict[str, np.ndarray]] = {}
    for name, drop in _scenarios().items():
        runs = [simulate_month(rng, args.tasks, args.repeats, drop) for _ in range(months)]
        results[name] = {rule: np.array([r[rule] for r in runs]) for rule in runs[0]}
    rules = list(next(iter(results.values())))
    print("\nStable months (false alarms):")
    print("| rule | months with an alarm | alarms per month | nights with an alarm |")
    print("|---|---:|---:|---:|")
    for rule in rules:
        alarms = results["stable"][rule]
        print(
            f"| {rule} | {alarms.any(axis=1).mean():.1%} | {alarms.sum(axis=1).mean():.2f} "
            f"| {alarms.mean():.2%} |"
        )
    print("\nDrops from night 1 on (share of months caught):")
    print("| rule | drop | first night | within 7 nights | within 30 nights |")
    print("|---|---:|---:|---:|---:|")
    for rule in rules:
        for name in ("2-point drop", "5-point drop", "10-point drop"):
            alarms = results[name][rule]
            print(
                f"| {rule} | {name.split('-')[0]} points | {alarms[:, 0].mean():.1%} "
                f"| {alarms[:, :7].any(axis=1).mean():.1%} | {alarms.any(axis=1).mean():.1%} |"
            )
    print("\nDrift of 1 point a night for 10 nights, then 10 points down (share caught):")
    print("| rule | within 10 nights | within 30 nights |")
    print("|---|---:|---:|")
    for rule in rules:
        alarms = results["drift 1 point a night for 10 nights"][rule]
        print(
            f"| {rule} | {alarms[:, :10].any(axis=1).mean():.1%} "
            f"| {alarms.any(axis=1).mean():.1%} |"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
