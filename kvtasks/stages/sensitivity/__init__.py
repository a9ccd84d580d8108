"""sensitivity: could the suite have gone red? One more head run with the route's output corrupted.

A green suite is evidence only if it could fail. After the head grid passed (or the repo tests,
when no grid ran), that run is launched once more while the probe corrupts what the route
produced: by default the last element of each floating output becomes 2*x + 1, --sensitivity-error
E applies a relative error E there instead, --sensitivity-mode nan makes the whole output NaN
(both: two runs), and --sensitivity-output NAME corrupts that argument after the call for routes
that write their output instead of returning it. A returned value that is an input, or shares its
memory, is never corrupted. The corrupted run is the ordinary run again as far as the process can
tell (its label, cells, files and scratch; a merged session is the whole session again, judged by
its grid or repository items), so the ordinary run is its control.

pass: every corrupted run failed (a test that saw a corrupted call failed on a comparison of what it
produced, kvtasks.harness.in_target.reads; or the script exited non-zero) and its receipt shows the
corruption applied. fail: a corrupted run stayed green, or its tests failed only elsewhere.
skip, with the reason and the flag that would help: no route, the route never reached, nothing
floating it produced to corrupt, or no green run to corrupt. These runs never count as evidence of
the kernel.

Blame: only when the PR changes the target or its test helpers does the suite also run corrupted
on base (base evidence: stored under its base sensitivity key and reused by every PR against that
base); sensitive on base and not on head is should-fix (a blocker when the PR changes no kernel
code), and a target the PR adds that cannot fail is should-fix. Otherwise a fail is a note about
the repository, not the PR.

Modules: runs (one corrupted run, launched as the ordinary run and judged), stage (the stage: the
run to repeat, the modes, base's evidence, blame).
"""
from kvtasks.stages.sensitivity.runs import NAME, judge_run
from kvtasks.stages.sensitivity.stage import BASE_EVIDENCE, STAGE, Sensitivity, base_evidence_name, run

__all__ = ["BASE_EVIDENCE", "NAME", "STAGE", "Sensitivity", "base_evidence_name", "judge_run", "run"]
