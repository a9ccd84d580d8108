"""What a caller mistake is: a flag, doit variable, manifest entry or host variable kvtasks refuses.

Raised before anything touches the worktree; each front door prints it as one line and exits 2.
It never carries a traceback or a finding about the PR.
"""


class UsageError(Exception):
    """A caller mistake: reported as one line, exit 2, no report, worktree untouched."""
