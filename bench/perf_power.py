"""Power of the perf statistics against the reference executor's best-of-3 rule, under noise.

A synthetic bench: 8 rows, PERF_REPEAT=3 samples per side, head 0%, 5% and 10% slower. Noise is
what GPU timings show: a few percent of log-normal jitter, plus an occasional slow sample (a
clock ramp or a neighbour: 15% of samples take 1.3-1.6x). Each scenario is repeated N times
(default 20); the same samples feed kvtasks' rule and the reference's rule (best sample per
side, median over rows, regression below 0.95). Prints the false-alarm rate at 0% (goal <= 5%)
and the detection rate at 10% (goal >= 95%) side by side. With --smoke, one trial of each
scenario: a check that the bench runs, not a measurement.
"""
import argparse

import numpy as np

from kvtasks.stages.perf.stats import best_of, compare

ROWS, REPEATS, THRESHOLD, MIN_ROWS = 8, 3, 0.95, 3


def side(rng, slowdown: float) -> list[dict]:
    logs = []
    for _ in range(REPEATS):
        tables = {}
        for row in range(ROWS):
            value = 10.0 * (row + 1) * (1 + slowdown) * rng.lognormal(0, 0.03)
            if rng.random() < 0.15:
                value *= rng.uniform(1.3, 1.6)
            tables[("bench", f"row{row}")] = {"time (us)": ("latency", value)}
        logs.append(tables)
    return logs


def reference_rule(base: list[dict], head: list[dict]) -> bool:
    ratios = []
    for row in range(ROWS):
        key = ("bench", f"row{row}")
        ratios.append(best_of([log[key]["time (us)"][1] for log in base],
                              [log[key]["time (us)"][1] for log in head], "latency"))
    return float(np.median(ratios)) < THRESHOLD


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="one trial of each scenario (overrides --trials)")
    args = parser.parse_args()
    trials = 1 if args.smoke else args.trials
    rng = np.random.default_rng(args.seed)
    print(f"{'head slower':>12} {'kvtasks flags':>14} {'best-of-3 flags':>16}")
    rates = {}
    for slowdown in (0.0, 0.05, 0.10):
        ours = theirs = 0
        for trial in range(trials):
            base, head = side(rng, 0.0), side(rng, slowdown)
            ours += compare(base, head, THRESHOLD, MIN_ROWS).status == "regression"
            theirs += reference_rule(base, head)
        rates[slowdown] = (ours / trials, theirs / trials)
        print(f"{slowdown:>11.0%} {ours / trials:>14.0%} {theirs / trials:>16.0%}")
    print(f"false alarms at 0%: {rates[0.0][0]:.0%} (best-of-3: {rates[0.0][1]:.0%}); "
          f"detection at 10%: {rates[0.10][0]:.0%} (best-of-3: {rates[0.10][1]:.0%})")


if __name__ == "__main__":
    main()
