"""What the test_policy stage reads and judges with, apart from the stage itself (its name, payload
and entry stay in `kvtasks.stages.test_policy`): `files` reads the PR's test files through the
stage's context, `criteria` holds the rules its findings apply to what was read.
"""
