"""The trust rules test_policy judges a PR's readings by: one object per rule, as bandit and ruff keep theirs.

A rule has its stable id (kvtasks.rules lists it with the run-time rules), its meaning, its severity,
what it finds in the readings (the stage's typed TestPolicy payload, read once per file) and two
examples beside it: a PR it must blame and its honest twin it must not. tests/unit/test_trust_rules.py
runs every example through the stage; `python -m kvtasks.front.doc_tables` writes the rules page from this
table. A new rule is one row here (and, where it needs a reading no rule has yet, that reading in
kvtasks.sources).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from kvtasks.report.model import Severity
    from kvtasks.stages.payloads import TestPolicy

# every example is a PR against this small repository: a row-scaling kernel and its test
TARGET = "tests/test_rows.py"
KERNEL = "kernels/rows.py"
ROUTE = "kernels.rows:scale_rows"
KERNEL_BASE = "def scale_rows(x, factor):\n    return x * factor\n"
KERNEL_FIXED = "def scale_rows(x, factor):\n    return (x * factor).copy()\n"
TEST_BASE = '''import numpy as np
import pytest

from kernels.rows import scale_rows

ATOL = 1e-5
SHAPES = [
    (4, 64),
    # (3, 100),
    (8, 128),
]


@pytest.mark.parametrize("M,N", SHAPES)
def test_scale(M, N):
    x = np.ones((M, N), dtype=np.float32)
    np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=ATOL, rtol=1e-6)
'''
EXAMPLE_BASE = {TARGET: TEST_BASE, KERNEL: KERNEL_BASE, "kernels/__init__.py": ""}
NEW_TARGET = "tests/test_new.py"
SELF_JUDGED = ('import numpy as np\n\nfrom kernels.rows import scale_rows\n\n\ndef test_new():\n'
               '    x = np.ones((3, 65), dtype=np.float32)\n'
               '    np.testing.assert_allclose(scale_rows(x, 2.0), scale_rows(x, 2.0))\n')


@dataclass(frozen=True)
class Example:
    """A PR: the files head changes (None deletes one), the base it is made against, the target and options."""
    head: dict[str, str | None]
    base: dict[str, str] = field(default_factory=lambda: EXAMPLE_BASE)
    target: str = TARGET
    options: dict[str, Any] = field(default_factory=dict)


def _widened(policy: TestPolicy) -> str:
    return ", ".join(f"{item['where']} {item['base']:g} -> {item['head']:g}"
                     + (f" ({item['basis']})" if item.get("basis") else "") for item in policy.loosened or [])


def _answer_key(policy: TestPolicy) -> list[str]:
    supplied = policy.reference_from_pr or []
    return [f"the PR adds the target, and its comparisons take every side from code the PR supplies: "
            f"{'; '.join(supplied[:3])}; nothing independent of the PR says what the kernel should compute, "
            "so PASS is out of reach"] if supplied else []


def _weakened_and_widened(policy: TestPolicy) -> list[str]:
    weakened = policy.weakened or policy.newly_commented_rows or []  # the weakenings, else the rows
    widened = len(policy.loosened or []) + len(policy.not_literal or [])
    if policy.kernel_files_changed or not weakened or not widened:
        return []
    return [f"a test-only change both weakens the suite and widens its tolerances: {len(weakened)} weakenings "
            f"with {widened} widened or uncomparable tolerances"]


def _above_table(policy: TestPolicy) -> list[str]:
    if not policy.exceeds_reference:
        return []
    ceiling = max(policy.reference_tolerances.values())
    return [f"the suite accepts error above the loosest --tol-table reference ({ceiling:g}): "
            f"{', '.join(f'{v:g}' for v in policy.exceeds_reference)}"]


@dataclass(frozen=True)
class TrustRule:
    id: str
    meaning: str
    severity: Severity
    finds: Callable[[TestPolicy], list[str]]  # one finding's detail per thing it blames
    bad: Example  # a PR the rule must blame
    good: Example  # its honest twin, which it must not


LOOSER = TEST_BASE.replace("ATOL = 1e-5", "ATOL = 1e-2")
# a test judged by a repository's own helper, whose defaults no reader knows
HELPER_JUDGED = TEST_BASE.replace("import pytest\n", "import pytest\nfrom helpers import check_close\n").replace(
    "np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=ATOL, rtol=1e-6)",
    "check_close(scale_rows(x, 2.0), x * 2.0, rtol=1e-6)")
HELPER_BASE = {**EXAMPLE_BASE, TARGET: HELPER_JUDGED}
TAMPERED_KERNEL = "import numpy as np\nnp.testing.assert_allclose = lambda *a, **k: None\n" + KERNEL_FIXED
# in the order a report lists them
TRUST_RULES: tuple[TrustRule, ...] = (
    TrustRule("policy.pr-supplies-answer-key",
              "the PR adds the target and its comparisons take every side from code the PR supplies", "note",
              _answer_key,
              bad=Example({NEW_TARGET: SELF_JUDGED, KERNEL: KERNEL_FIXED}, target=NEW_TARGET),
              good=Example({NEW_TARGET: SELF_JUDGED.replace("scale_rows(x, 2.0))\n", "x * 2.0)\n"),
                            KERNEL: KERNEL_FIXED}, target=NEW_TARGET)),
    TrustRule("policy.tampers-with-judges", "code outside the tests reaches into what judges it", "blocker",
              lambda policy: [f"code outside the tests reaches into what judges it: {tampered}; the kernel's result "
                              "must be judged by the tests, not shape them" for tampered in policy.tampering or []],
              bad=Example({KERNEL: TAMPERED_KERNEL}),
              good=Example({KERNEL: "import numpy as np\n" + KERNEL_FIXED.replace("(x * factor).copy()",
                                                                                  "np.multiply(x, factor)")})),
    TrustRule("policy.startup-code", "the PR adds or changes interpreter start-up code", "blocker",
              lambda policy: [f"the PR adds or changes interpreter start-up code ({path}): Python would run it in a "
                              "target before anything kvtasks controls, which could change what judges the kernel; "
                              "targets never load a checkout's start-up modules" for path in policy.startup_files or []],
              bad=Example({"sitecustomize.py": "import numpy\n", KERNEL: KERNEL_FIXED}),
              good=Example({"kernels/sitecustom.py": "X = 1\n", KERNEL: KERNEL_FIXED})),
    TrustRule("policy.compiled-module",
              "the PR adds or changes compiled code Python can import (an extension module, sourceless bytecode)",
              "blocker",
              lambda policy: [f"the PR adds or changes {path}, compiled code Python can import: it runs in the "
                              "process that judges the kernel, and no reader can see what it does there"
                              for path in policy.compiled_modules or []],
              bad=Example({"kernels/_rows.so": "\x7fELF", KERNEL: KERNEL_FIXED}),
              good=Example({"kernels/rows.cu": "__global__ void rows() {}\n", KERNEL: KERNEL_FIXED})),
    TrustRule("policy.shadows-stdlib", "the PR adds or changes a file named like a standard-library module", "blocker",
              lambda policy: [f"the PR adds or changes {path}, named like a standard-library module: the checkout is "
                              "on the path ahead of the standard library, so it would stand in for that module in "
                              "every target process, kvtasks' own probe included" for path in policy.stdlib_shadows or []],
              bad=Example({"random.py": "def random():\n    return 0.5\n", KERNEL: KERNEL_FIXED}),
              good=Example({"kernels/random.py": "def random():\n    return 0.5\n", KERNEL: KERNEL_FIXED})),
    TrustRule("policy.tolerance-widened-with-kernel",
              "a tolerance widened alongside a kernel change; needs numerical justification", "should-fix",
              lambda policy: [f"tolerance widened alongside a kernel change; needs numerical justification: "
                              f"{_widened(policy)}"] if policy.loosened and policy.kernel_files_changed else [],
              bad=Example({TARGET: LOOSER, KERNEL: KERNEL_FIXED}),
              good=Example({TARGET: TEST_BASE.replace("ATOL = 1e-5", "ATOL = 1e-6"), KERNEL: KERNEL_FIXED})),
    TrustRule("policy.tolerance-widened-test-only", "a test-only change widens tolerances", "blocker",
              lambda policy: [f"test-only change widens tolerances, so the suite can no longer fail: "
                              f"{_widened(policy)}"] if policy.loosened and not policy.kernel_files_changed else [],
              bad=Example({TARGET: LOOSER}),
              good=Example({TARGET: TEST_BASE.replace("ATOL = 1e-5", "ATOL = 1e-6 * 10")})),
    TrustRule("policy.tolerance-uncomparable", "a tolerance cannot be compared with base's", "should-fix",
              lambda policy: [f"tolerance cannot be compared with base: {uncomparable}"
                              for uncomparable in policy.not_literal or []],
              bad=Example({TARGET: TEST_BASE.replace("ATOL = 1e-5", "import os\nATOL = float(os.environ['ATOL'])")}),
              good=Example({TARGET: TEST_BASE.replace("ATOL = 1e-5", "ATOL = 10 ** -5")})),
    TrustRule("policy.tolerance-above-table", "the suite accepts error above the loosest --tol-table reference",
              "should-fix", _above_table,
              bad=Example({KERNEL: KERNEL_FIXED}, options={"tol_table": "f32=1e-6"}),
              good=Example({KERNEL: KERNEL_FIXED}, options={"tol_table": "f32=1e-5"})),
    TrustRule("policy.shape-rows-commented-out", "more shape rows commented out than on base", "should-fix",
              lambda policy: [f"{policy.commented_out_shape_rows_added} more shape rows commented out: "
                              f"{'; '.join((policy.newly_commented_rows or [])[:5])}"]
              if policy.newly_commented_rows else [],
              bad=Example({TARGET: TEST_BASE.replace("    (8, 128),", "    # (8, 128),"), KERNEL: KERNEL_FIXED}),
              good=Example({TARGET: TEST_BASE.replace("def test_scale", "def test_scale_rows"),
                            KERNEL: KERNEL_FIXED})),
    TrustRule("policy.target-deleted", "the PR deletes the target test", "should-fix",
              lambda policy: [f"the PR deletes the target test: {policy.target_deleted}; head has nothing of it to "
                              "run, so the PR is judged without it"] if policy.target_deleted else [],
              bad=Example({TARGET: None, KERNEL: KERNEL_FIXED}),
              good=Example({"tests/test_old.py": None, KERNEL: KERNEL_FIXED})),
    TrustRule("policy.comparison-weakened", "a comparison weakened without a number moving", "should-fix",
              lambda policy: [f"comparison weakened without a number moving: {weakening}"
                              for weakening in policy.weakened or []],
              bad=Example({TARGET: TEST_BASE.replace("    x = np.ones", "    pytest.skip('flaky')\n    x = np.ones")}),
              good=Example({TARGET: TEST_BASE.replace("    x = np.ones", "    assert M > 0\n    x = np.ones")})),
    TrustRule("policy.tolerance-added", "a tolerance added where base passed none", "note",
              lambda policy: [f"tolerance added where base passed none: {unknown}"
                              for unknown in policy.added_with_unknown_default or []],
              bad=Example({TARGET: HELPER_JUDGED.replace("rtol=1e-6)", "rtol=1e-6, atol=1e-3)")}, base=HELPER_BASE),
              good=Example({TARGET: HELPER_JUDGED.replace("rtol=1e-6)", "rtol=1e-7)")}, base=HELPER_BASE)),
    TrustRule("policy.weakened-and-widened", "a test-only change both weakens the suite and widens its tolerances",
              "blocker", _weakened_and_widened,
              bad=Example({TARGET: LOOSER.replace("    (8, 128),", "    # (8, 128),")}),
              good=Example({TARGET: LOOSER.replace("    (8, 128),", "    # (8, 128),"), KERNEL: KERNEL_FIXED})),
)
