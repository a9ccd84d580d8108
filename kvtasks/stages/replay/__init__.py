"""replay: the route called again outside any test, and judged by kvtasks' own comparison.

A kernel can be right only under its test (it reads PYTEST_VERSION, faulthandler, the type of
sys.stdout, its session), judged by a reference the PR changed beside it, or return an array whose
own arithmetic lies to `assert_allclose`. Each is the PR's code judging itself inside the PR's
process, so the evidence here never runs through the test: the runs capture a bounded sample of
route calls as data (kvtasks.harness.in_target.capture), and a fresh interpreter with an ordinary
user's environment calls the route again on them in each side's tree (kvtasks.harness.replaying).

- head's calls replayed in head's tree must give what they gave in the run: a difference is a
  blocker (replay.differs-under-test), measured against the route's own nondeterminism (a second
  replay) and the tolerance table; unless base's calls differ outside base's test as well (its
  test setup changes the route): then the replay is no evidence here, a note;
- an array type of the route's own that base's route did not return is a blocker (replay.output-type);
- base's calls replayed in head's tree, against what base's route produced for them (base's code:
  its run stands for it; once head differs, base's calls are replayed in base's tree too and head
  is judged by that): a difference beyond the table and the tolerance base's test gave itself is a
  should-fix where base's test passed and the PR leaves its file alone
  (replay.changed-where-base-passed), a note elsewhere (a fix, an intended change);
- base's calls capturable and head's not: a should-fix.

PASS needs the replay run and agreed, unless no call could be captured on either side, or the PR
changes no route-side file (head's route is then base's; the base oracle holds its test side), said.

Modules: compare (kvtasks' comparison of two calls' products), stage (the stage).
"""
from kvtasks.stages.replay.stage import NAME, STAGE, Replay

__all__ = ["NAME", "STAGE", "Replay"]
