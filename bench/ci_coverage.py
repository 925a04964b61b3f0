"""Coverage of gymflow's 95% intervals on simulated runs whose true values are known.

Each simulated run draws every task's true pass probability from a Beta distribution (the
population of tasks), then each of its repeats passes with that probability. The truths are the
population's: pass@1 = E[p], pass@k = 1 - E[(1 - p)^k]. For every run the script computes the
intervals with the functions the profile uses and counts how often they cover the truth:

  - "z" is the interval gymflow printed before: mean +- 1.96 * clustered SE;
  - "t" the same SE with the t quantile at tasks - 1 degrees of freedom;
  - "profile" is what `gym eval profile` prints now (`bounded_mean_ci95`: Wilson on the
    clustered effective sample size, t quantile), and the share of z intervals that left [0, 1];
  - "bootstrap pass@k" is the profile's percentile bootstrap over tasks (`bootstrap_ci95`).

A second table checks the intra-task correlation: the mean over runs of the profile's ICC(1)
(`variance_components`, one-way ANOVA) beside the plug-in share var(task means) / total that
gymflow printed before, against the population's true ICC, 1 / (alpha + beta + 1).

A third checks the power figure: at the tasks `mcnemar_tasks_needed` asks for, it simulates
paired comparisons and counts how often McNemar's test, as the comparison prints it, rejects
(the target is 80%); and it shows how much the figure moves between runs of 200 tasks (10th to
90th percentile), since each run plugs in its own observed share of discordant tasks.

The boundary tables (issue 30) are where intervals used to collapse to a point:
  - near the ceiling, pass@1 (the profile's interval) and the pass@k band at k = repeats: the
    bootstrap alone (old) beside the band the profile prints now (`widened_band`), with the
    share of zero-width old bands;
  - the paired CI of a comparison near the ceiling, with a true difference of 0 and of +2
    points: the plain paired t (old) beside `paired_t`, with the share of zero-width old
    intervals and the new test's rejection rate (its size, when the truth is 0);
  - a study's family-wise error under a global null with 8 variants: the share of studies
    that colour some variant, before (colour by the unadjusted CI) and now (Bonferroni);
  - the regression gate's false alarms and detection at the nightly's size (from
    bench/gate_calibration.py, which has the full table).

Seeded: the same arguments print the same table.

    python bench/ci_coverage.py                       # default: 1,000 runs a size, ~8 min
    python bench/ci_coverage.py --runs 10000 --tasks 10 20
    python bench/ci_coverage.py --tiny                # a few runs: checks that it runs
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import tiny
from gate_calibration import NIGHTS, simulate_month

from gymflow.analysis.distributions import t_quantile
from gymflow.analysis.paired import mcnemar, mcnemar_tasks_needed, paired_t
from gymflow.analysis.passk import pair_curves
from gymflow.analysis.stats import (
    ALPHA,
    Z95,
    bootstrap_ci95,
    bounded_mean_ci95,
    clustered_stderr,
    t_interval,
    variance_components,
    widened_band,
)
from gymflow.study.results import bonferroni

#: name -> (alpha, beta) of the task population's Beta distribution
POPULATIONS = {
    "middling (Beta(2, 3), pass@1 40%)": (2.0, 3.0),
    "hard (Beta(0.3, 2.7), pass@1 10%)": (0.3, 2.7),
}


def truth(alpha: float, beta: float, k: int) -> float:
    """pass@k of the population: 1 - E[(1 - p)^k] for p ~ Beta(alpha, beta)."""
    return 1.0 - math.prod((beta + j) / (alpha + beta + j) for j in range(k))


def coverage(
    rng: np.random.Generator,
    alpha: float,
    beta: float,
    tasks: int,
    repeats: int,
    runs: int,
    bootstrap_samples: int,
) -> dict[str, float]:
    true1, truek = truth(alpha, beta, 1), truth(alpha, beta, repeats)
    ks = np.array([1, repeats])
    hits = {"z": 0, "t": 0, "profile": 0, "z outside [0,1]": 0, "boot pass@1": 0, "boot pass@k": 0}
    hits |= {"band pass@k": 0, "zero-width boot": 0}
    for run in range(runs):
        c = rng.binomial(repeats, rng.beta(alpha, beta, size=tasks))
        n = np.full(tasks, repeats)
        rates = c / repeats
        mean = float(rates.mean())
        se = clustered_stderr(rates.tolist())
        z_low, z_high = mean - Z95 * se, mean + Z95 * se
        half = t_quantile(0.975, tasks - 1) * se
        hits["z"] += z_low <= true1 <= z_high
        hits["t"] += mean - half <= true1 <= mean + half
        hits["z outside [0,1]"] += z_low < 0.0 or z_high > 1.0
        low, high = bounded_mean_ci95(mean, se, tasks=tasks, rollouts=tasks * repeats).bounds
        hits["profile"] += low <= true1 <= high
        at_table, _, group = pair_curves(n, c, ks)
        b_low, b_high = bootstrap_ci95(at_table, groups=group, samples=bootstrap_samples, seed=run)
        hits["boot pass@1"] += b_low[0] <= true1 <= b_high[0]
        hits["boot pass@k"] += b_low[1] <= truek <= b_high[1]
        hits["zero-width boot"] += b_low[1] == b_high[1]
        band = widened_band(b_low[1], b_high[1], at_table[group, 1], independent=tasks)
        hits["band pass@k"] += band[0] <= truek <= band[1]
    return {name: count / runs for name, count in hits.items()}


def icc_check(
    rng: np.random.Generator, alpha: float, beta: float, tasks: int, repeats: int, runs: int
) -> tuple[float, float]:
    """Mean over runs of (ANOVA ICC(1), plug-in between share)."""
    anova, plug_in = [], []
    n = np.full(tasks, repeats)
    for _ in range(runs):
        p = rng.beta(alpha, beta, size=tasks) if alpha else np.full(tasks, 0.5)
        c = rng.binomial(repeats, p)
        icc = variance_components(n, c, c)["icc"]
        rates = c / repeats
        between, within = float(np.var(rates)), float(np.mean(rates * (1 - rates)))
        if icc is not None and between + within > 0:
            anova.append(icc)
            plug_in.append(between / (between + within))
    return float(np.mean(anova)), float(np.mean(plug_in))


def power_check(rng: np.random.Generator, runs: int) -> list[tuple[float, float, int, float, str]]:
    """(discordant share, difference, tasks needed, simulated rejection rate, 10th-90th
    percentile of the figure from runs of 200 tasks) per scenario."""
    rows = []
    for discordant, difference in ((0.2, 0.1), (0.4, 0.1), (0.3, 0.05)):
        needed, _ = mcnemar_tasks_needed(discordant, difference)
        p10, p01 = (discordant + difference) / 2, (discordant - difference) / 2
        cells = rng.multinomial(needed, [p10, p01, 1 - discordant], size=runs)
        rejected = sum(mcnemar(int(b), int(c))["p_value"] <= 0.05 for b, c, _ in cells)
        figures = []
        for b, c, _ in rng.multinomial(200, [p10, p01, 1 - discordant], size=100):
            figure, _ = mcnemar_tasks_needed((b + c) / 200, difference)
            figures.append(math.inf if figure is None else figure)
        low, high = np.percentile(figures, [10, 90])
        rows.append((discordant, difference, needed, rejected / runs, f"{low:,.0f}–{high:,.0f}"))
    return rows


#: name -> (alpha, beta): task populations near the ceiling, where every task often passes
CEILING = {
    "easy (Beta(9, 1), pass@1 90%)": (9.0, 1.0),
    "ceiling (Beta(20, 0.5), pass@1 97.6%)": (20.0, 0.5),
}


def _old_paired(d: np.ndarray) -> tuple[float, float]:
    """The paired t interval gymflow printed before: no floor on the spread."""
    mean = float(d.mean())
    half = t_quantile(0.975, len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return max(mean - half, -1.0), min(mean + half, 1.0)


def paired_check(
    rng: np.random.Generator,
    alpha: float,
    beta: float,
    tasks: int,
    repeats: int,
    shift: float,
    runs: int,
) -> dict[str, float]:
    """Coverage of the true mean difference E[p - max(p - shift, 0)] by the old and the new
    paired interval, when run B passes each task `shift` less often than run A."""
    draws = rng.beta(alpha, beta, size=400_000)
    truth = float(np.mean(draws - np.maximum(draws - shift, 0.0)))
    hits = {"old": 0, "old zero-width": 0, "new": 0, "new rejects": 0}
    for _ in range(runs):
        p = rng.beta(alpha, beta, size=tasks)
        a = rng.binomial(repeats, p) / repeats
        b = rng.binomial(repeats, np.maximum(p - shift, 0.0)) / repeats
        d = a - b
        low, high = _old_paired(d)
        hits["old"] += low <= truth <= high
        hits["old zero-width"] += low == high
        test = paired_t(d)
        low, high = test.interval.bounds
        hits["new"] += low <= truth <= high
        hits["new rejects"] += test.p_value <= ALPHA
    return {name: count / runs for name, count in hits.items()}


def study_fwer(
    rng: np.random.Generator, alpha: float, beta: float, tasks: int, repeats: int, runs: int
) -> dict[str, float]:
    """Share of studies under a global null (8 variants, every run of the same tasks at the
    same probabilities) that colour some variant: before, by its unadjusted paired CI; now, by
    its Bonferroni-adjusted p (its simultaneous interval excluding 0); and the share whose
    simultaneous intervals all cover the true difference, 0."""
    variants = 8
    old = new = cover = 0
    for _ in range(runs):
        p = rng.beta(alpha, beta, size=tasks)
        base = rng.binomial(repeats, p) / repeats
        differences = [rng.binomial(repeats, p) / repeats - base for _ in range(variants)]
        old += any(low > 0 or high < 0 for low, high in map(_old_paired, differences))
        tests = [paired_t(d) for d in differences]
        new += any(q <= ALPHA for q in bonferroni([t.p_value for t in tests]))
        bounds = [
            t_interval(t.difference, t.stderr, tasks, alpha=ALPHA / variants).bounds for t in tests
        ]
        cover += all(low <= 0 <= high for low, high in bounds)
    return {"old": old / runs, "new": new / runs, "cover": cover / runs}


def print_boundary(rng: np.random.Generator, runs: int, bootstrap_samples: int, tiny: bool) -> None:
    sizes = [(5, 1), (20, 4)] if tiny else [(5, 1), (10, 1), (20, 1), (5, 16), (20, 16), (50, 4)]
    print("\nNear the ceiling: pass@1 and the pass@k band at k = repeats")
    print(
        "| task population | tasks x repeats | pass@1 (profile) | pass@k bootstrap (old) "
        "| old band of zero width | pass@k band (now) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (alpha, beta) in CEILING.items():
        for tasks, repeats in sizes:
            got = coverage(rng, alpha, beta, tasks, repeats, runs, bootstrap_samples)
            print(
                f"| {name} | {tasks} x {repeats} | {got['profile']:.1%} "
                f"| {got['boot pass@k']:.1%} | {got['zero-width boot']:.1%} "
                f"| {got['band pass@k']:.1%} |"
            )
    print("\nPaired CI of A - B near the ceiling (B passes each task `shift` less often)")
    print(
        "| task population | tasks x repeats | shift | old t: coverage | old: zero width "
        "| paired_t (now): coverage | now: rejects at 5% |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (alpha, beta) in CEILING.items():
        for tasks, repeats in [(5, 1), (20, 1)] if tiny else [(5, 1), (20, 1), (50, 1), (50, 4)]:
            for shift in (0.0, 0.02):
                got = paired_check(rng, alpha, beta, tasks, repeats, shift, runs)
                print(
                    f"| {name} | {tasks} x {repeats} | {100 * shift:+.0f} points "
                    f"| {got['old']:.1%} | {got['old zero-width']:.1%} | {got['new']:.1%} "
                    f"| {got['new rejects']:.1%} |"
                )
    print("\nStudy under a global null, 8 variants (nominal family-wise error 5%)")
    print(
        "| task population | tasks x repeats | some variant coloured, old (unadjusted CI) "
        "| now (Bonferroni) | all 8 simultaneous intervals cover 0 |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, (alpha, beta) in {**POPULATIONS, **CEILING}.items():
        for tasks, repeats in [(30, 2)] if tiny else [(30, 2), (50, 4)]:
            got = study_fwer(rng, alpha, beta, tasks, repeats, runs)
            print(
                f"| {name} | {tasks} x {repeats} | {got['old']:.1%} | {got['new']:.1%} "
                f"| {got['cover']:.1%} |"
            )
    months = 4 if tiny else max(runs // 2, 1)
    print(
        f"\nRegression gate at 50 tasks x 4 repeats, {months:,} simulated {NIGHTS}-night months "
        "(bench/gate_calibration.py has the full table)"
    )
    print("| rule | stable months with an alarm | 5-point drop caught in 30 nights "
          "| 10-point drop caught in 7 nights |")  # fmt: skip
    print("|---|---:|---:|---:|")
    scenarios = {"stable": 0.0, "5": 0.05, "10": 0.10}
    found = {
        name: [simulate_month(rng, 50, 4, lambda t, d=drop: d) for _ in range(months)]
        for name, drop in scenarios.items()
    }
    for rule in found["stable"][0]:
        stable = np.mean([any(m[rule]) for m in found["stable"]])
        five = np.mean([any(m[rule]) for m in found["5"]])
        ten = np.mean([any(m[rule][:7]) for m in found["10"]])
        print(f"| {rule} | {stable:.1%} | {five:.1%} | {ten:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="simulated runs per size")
    parser.add_argument("--tasks", type=int, nargs="+", default=[10, 20, 100, 1000])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--bootstrap-samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261130)
    args = tiny.parse(parser, runs=20, tasks=[10], bootstrap_samples=200)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(
        f"95% CI coverage of the true value, nominal 95.0%; {args.runs:,} seeded runs per row "
        f"(Monte-Carlo SE about {100 * math.sqrt(0.95 * 0.05 / args.runs):.1f} points), "
        f"{args.repeats} repeats a task, seed {args.seed}"
    )
    for name, (alpha, beta) in POPULATIONS.items():
        print(f"\ntask population: {name}")
        print(
            "| tasks | z (old) | t | profile (Wilson-t) | z outside [0, 1] "
            f"| bootstrap pass@1 | bootstrap pass@{args.repeats} (old) "
            f"| pass@{args.repeats} band (now) |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for tasks in args.tasks:
            got = coverage(rng, alpha, beta, tasks, args.repeats, args.runs, args.bootstrap_samples)
            print(
                f"| {tasks:,} | {got['z']:.1%} | {got['t']:.1%} | {got['profile']:.1%} "
                f"| {got['z outside [0,1]']:.1%} | {got['boot pass@1']:.1%} "
                f"| {got['boot pass@k']:.1%} | {got['band pass@k']:.1%} |"
            )
    print(f"\nICC, mean over {args.runs // 4:,} runs of {args.repeats} repeats a task:")
    print("| task population | true ICC | tasks | ICC(1), one-way ANOVA | plug-in share (old) |")
    print("|---|---:|---:|---:|---:|")
    for name, (alpha, beta), true in (
        ("every task at 50%", (0.0, 0.0), 0.0),
        ("Beta(2, 3)", (2.0, 3.0), 1 / 6),
    ):
        for tasks in (10, 100):
            anova, plug_in = icc_check(rng, alpha, beta, tasks, args.repeats, args.runs // 4)
            print(f"| {name} | {true:.3f} | {tasks} | {anova:.3f} | {plug_in:.3f} |")
    print("\nMcNemar power at the tasks-needed figure (target 80%), simulated comparisons:")
    print(
        "| discordant share | difference | tasks needed | rejected "
        "| figure from a 200-task run, 10th–90th pct |"
    )
    print("|---:|---:|---:|---:|---:|")
    for discordant, difference, needed, rate, spread in power_check(rng, args.runs):
        print(f"| {discordant:.0%} | {difference:.0%} | {needed:,} | {rate:.1%} | {spread} |")
    print_boundary(rng, args.runs, args.bootstrap_samples, args.tiny)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
