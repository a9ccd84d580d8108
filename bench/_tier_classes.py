"""How `bench/tier_coverage.py` and `bench/tier_matrix.py` count an item's class: one rule for both
lines.

    python bench/_tier_classes.py --smoke

counts one item of every class the benches give and prints the lines they would print: a check that
the rule still counts as documented, not a measurement. Its last line is
`tier classes: P% of N items reached a test outcome (tier crashes C)`.
"""
from __future__ import annotations

import argparse
import sys

# outside N: the repository's own skips, and a repository whose package does not import under the
# release without the tier either (its pinned commit does not run there at all)
APART = ("repository skip", "does not import")
# a test outcome the tier reached: "not exercised" is a test that passed having launched no kernel;
# whether a GPU would have launched one is not checked, so `strictly` gives the share without them
REACHED = ("passed", "failed", "not exercised")


def counts(results: list[dict]) -> tuple[float, int, int]:
    """(P, N, C): the percentage of the N items outside APART that reached a test outcome, and the tier
    crashes among them."""
    counted = [r for r in results if r["class"] not in APART]
    reached = [r for r in counted if r["class"] in REACHED]
    crashes = [r for r in counted if r["class"] == "tier crash"]
    return 100.0 * len(reached) / len(counted) if counted else 0.0, len(counted), len(crashes)


def strictly(results: list[dict]) -> str:
    """The percentage with the not-exercised items left out of the reached ones: whether a GPU would
    also have launched no kernel for them is not checked here."""
    percent, counted, _ = counts([{**r, "class": "no kernel ran"} if r["class"] == "not exercised" else r
                                  for r in results])
    return f"{percent:.1f}% of {counted} items reached a test outcome counting not-exercised items as not reached"


def apart_line(results: list[dict]) -> str:
    """What the lines count apart: the items outside N, and the reached items that tested no kernel."""
    classes = [r["class"] for r in results]
    return "; ".join(f"{name} {classes.count(name)}" for name in (*APART, "not exercised"))


# every class tier_coverage gives an item
CLASSES = ("passed", "not exercised", "failed", "no test ran", "tier crash", "timed out", "sparse grid",
           "repository skip", "does not import")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", required=True, help="count one item of every class")
    parser.parse_args()
    sample = [{"class": name} for name in CLASSES]
    percent, counted, crashes = counts(sample)
    print(f"counted apart: {apart_line(sample)}; {strictly(sample)}")
    print(f"tier classes: {percent:.1f}% of {counted} items reached a test outcome (tier crashes {crashes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
