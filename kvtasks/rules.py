"""Every finding's stable rule id and what it means.

A report's consumer (a bot, a dashboard, a CI gate) matches findings by `rule`, never by their
wording, which changes: a rule id, once published, keeps its meaning; a finding that means something
new gets a new id. `python -m kvtasks.front.doc_tables` writes this table into docs/rules.md, and a test
holds the page to it and every finding kvtasks emits to a rule listed here.
"""
from kvtasks.sources.trust_rules import TRUST_RULES

# the rules decided at run time and by stages other than test_policy; test_policy's trust rules, each
# with its examples, are kvtasks.sources.trust_rules's registry
_DECIDED_ELSEWHERE: dict[str, str] = {
    # baseline
    'baseline.dirty-after-base': 'the base run did not leave a clean worktree, so head failures cannot be attributed',
    'baseline.run-unusable': 'the base run cannot stand as evidence',
    # config
    'config.changed-by-pr': "the PR changes kvtasks' configuration in the repository; base's was used",
    'config.inferred': "no target was configured: base's impact map chose it from the PR's changed files",
    'config.not-validated': "the PR changes files no target of base's map validates; PASS waits on them",
    # containment
    'containment.git-changed-by-run': "a run changed the repository's own .git hooks, info or config; they were put back",
    'containment.head-left-processes': "a head launch left processes running where base's did not; they were ended",
    'containment.log-cut': "a run's output passed the log ceiling; what it wrote between its first and last parts was cut",
    # cpu-tier
    'cpu-tier.autotune-once': 'autotune ran every config once per kernel and key',
    'cpu-tier.known-bad-environment': 'the Triton CPU tier could not run in this environment',
    'cpu-tier.libdevice-missing': 'libdevice functions without an equivalent in the Triton interpreter',
    'cpu-tier.missing-packages': 'the Triton CPU tier could not run: packages missing from PYTHON_BIN',
    'cpu-tier.not-exercised': 'tests that passed on the CPU tier without launching a kernel or calling a route',
    'cpu-tier.out-of-bounds': 'an out-of-bounds memory access on head',
    'cpu-tier.out-of-bounds-fixed': 'the PR fixes an out-of-bounds access base has',
    'cpu-tier.sparse-grid-bounds-only': 'sparse-grid launches were checked for bounds only',
    # environment
    'environment.incomplete': "the target's interpreter lacks a dependency the code under test imports; nothing was tested, and no --fail-on lets it pass",
    # fleet
    'fleet.arch-not-run': 'an architecture of a fleet batch has no result',
    'fleet.different-runtimes': 'the architectures ran on different runtimes, so each has base evidence of its own',
    # gpu
    'gpu.activity-unavailable': 'GPU activity is unavailable; the device was judged idle by VRAM only',
    'gpu.all-busy': 'another validator holds every idle GPU',
    'gpu.not-claimed': 'no GPU was claimed; no runtime correctness claim is made',
    'gpu.probe-unusable': 'the run without a visible GPU cannot stand as evidence',
    'gpu.ran-without-gpu': 'the target ran without a GPU; its correctness evidence is CPU-only',
    # grid
    'grid.axes-not-run': 'grid axes that could not be run',
    'grid.base-timed-out': "the grid fails on head and base's run timed out, so nothing is attributed",
    'grid.cells-interpreter-skipped': 'grid cells the Triton interpreter cannot run were not run',
    'grid.cells-skipped-on-head': 'grid cells that ran on base are skipped or deselected on head',
    'grid.cells-unrun': 'grid cells not executed on either side',
    'grid.channel-not-shown': 'the grid channel was not shown to reach the target',
    'grid.crashed': "the grid run died on head after reaching the route (a signal, an abort, an exit mid-session), where base's completed",
    'grid.duplicates-defaults': "the grid duplicates the target's defaults; it earns no pass",
    'grid.executed-nothing': 'the grid executed nothing; no correctness claim is made',
    'grid.failed-before-route': 'the grid run failed without reaching routed work',
    'grid.fails-new-target': 'the PR adds the target, and the grid fails on head',
    'grid.fails-on-checkout': 'the grid fails on the supplied checkout (no patch to compare with)',
    'grid.no-cells': "no grid cells; coverage is the repository's defaults",
    'grid.no-channel': "no grid channel was established; coverage is the repository's defaults",
    'grid.red-on-both-sides': 'the grid is red on both sides, so the failure is not attributed to the PR',
    'grid.regression': 'the grid passes on base and fails on head',
    'grid.tier-crash-on-head': 'the CPU tier could not run the grid on head only: INCONCLUSIVE, never the PR\'s fault',
    'grid.tier-limitation': 'the CPU tier could not run the grid on either side',
    # merge
    'merge.dirty-worktree': 'the supplied worktree has tracked, untracked or ignored changes',
    'merge.patch-does-not-apply': 'the patch does not apply to the current base',
    # nonfinite
    'nonfinite.new-on-head': 'NaN/Inf on head where base returned only finite values',
    # oracle
    'oracle.api-changed': "base's tests no longer fit head's code: an API the PR changed",
    'oracle.cannot-judge-weakened': "base's tests cannot judge head's code (an API change) and the PR weakened its tests",
    'oracle.fails-weakened': 'head fails tests base had, and the PR weakened those tests',
    'oracle.new-target-own-answer': "a new target's tests pass only with the PR's own test side",
    'oracle.regression': "head's code fails tests and cells that pass on base once the PR's test side is kept at base",
    # perf
    'perf.not-compared': 'no perf comparison was made',
    'perf.slower': 'head is slower than base on the same locked GPU',
    # policy
    'policy.effective-tolerance-looser': 'a comparison received a looser tolerance on head than on base, wherever it was spelt',
    'policy.judging-call-vanished': "a judging call base's passing test made is gone from head's",
    'policy.skipif-not-taken': "a skipif the PR adds did not skip here: the test ran on head and passed",
    # receipt
    'receipt.arguments-written': "head's route writes into arguments base's route left unchanged",
    'receipt.judged-by-checkout': "head's run judged with functions bound to the checkout's code, which base's runs did not",
    'receipt.not-established': 'the execution receipt was not established; PASS is not permitted',
    # report
    'report.pass-withheld': 'every stage passed, but the PASS gate names what the report still lacks',
    'report.stage-missing': 'a stage recorded no result; the validation is inconclusive',
    # run
    'run.crashed': 'a kvtasks group crashed; no verdict rests on the run',
    'run.recovered': 'this run first undid what a killed earlier run left in the worktree',
    # runtime
    'runtime.compat-not-established': 'runtime compatibility of base and head was not established; the correctness stages are limited',
    'runtime.import-broken': 'the PR breaks importing the module base imports from the same runtime',
    # selection
    'selection.provenance': 'where the target test comes from (pre-existing, added or modified by the PR)',
    # replay
    'replay.capture-lost-on-head': "base's calls of the route could be captured and head's cannot",
    'replay.changed': "head's route differs from base's on base's inputs where base's test does not hold it to them",
    'replay.changed-where-base-passed': "head's route differs from base's on the inputs of a passing base test the PR leaves alone",
    'replay.differs-on-both-sides': "outside the test the route differs from what it gave in it on base as on head: the test's setup changes it",
    'replay.differs-under-test': 'the route gives other results outside the test than in it, on the same inputs',
    'replay.nondeterministic': "the route's replays differ from each other; the comparison was widened, within a bound",
    'replay.output-type': "the route returns an array type of its own that base's route did not",
    # sensitivity
    'sensitivity.base-unknown': "base's sensitivity could not be established",
    'sensitivity.insensitive-new-target': "the PR adds a target whose suite does not fail with the route's output corrupted",
    'sensitivity.insensitive-no-patch': "the suite does not fail with the route's output corrupted, on a checkout with no patch",
    'sensitivity.insensitive-on-base-too': "base's suite cannot detect a corrupted route either",
    'sensitivity.insensitive-untouched': "the suite does not fail with the route's output corrupted, and the PR changes neither the target nor its helpers",
    'sensitivity.lost-on-head': 'the suite detects a corrupted route on base and not on head',
    # target
    'target.base-timed-out': "the target fails on head and base's run timed out, so nothing is attributed",
    'target.crashed': "the target's run died on head after reaching the route (a signal, an abort, an exit mid-session), where base's completed",
    'target.fails-new-target': 'the PR adds the target, and the target fails on head',
    'target.fails-on-checkout': 'the target fails on the supplied checkout (no patch to compare with)',
    'target.red-on-both-sides': 'the target is red on both sides, so the failure is not attributed to the PR',
    'target.regression': 'the target passes on base and fails on head',
    'target.tier-crash-on-head': 'the CPU tier could not run the target on head only: INCONCLUSIVE, never the PR\'s fault',
    'target.tier-limitation': 'the CPU tier could not run the target on either side',
    # tests
    'tests.addopts-dropped': "pytest options the repository's configuration adds were dropped from the run",
    'tests.executed-nothing': 'the head target executed no test; no correctness claim is made',
    'tests.head-left-artifacts': 'the head run left files in the worktree; they were removed',
    'tests.head-not-applied': 'head was not tested: the patch did not apply after the base run',
    'tests.pytest-refused': 'pytest refused its command line on head, so no test ran',
    'tests.run-unusable': 'the run cannot stand as evidence (its receipt or session is unusable)',
    'tests.runner-executed-nothing': 'the chosen runner executed nothing; the runner choice is in doubt',
}

RULES: dict[str, str] = dict(sorted({**_DECIDED_ELSEWHERE, **{rule.id: rule.meaning for rule in TRUST_RULES}}.items()))


def known(rule: str) -> str:
    """`rule`, if the table lists it (a finding with an unlisted rule is kvtasks' bug, not the PR's)."""
    if rule not in RULES:
        raise ValueError(f"{rule!r} is no rule of kvtasks.rules.RULES")
    return rule
