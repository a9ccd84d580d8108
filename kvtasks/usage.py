"""What a caller mistake is: a flag, doit variable, manifest entry or host variable kvtasks refuses.

Raised before anything touches the worktree; each front door prints it as one line and exits
USAGE_EXIT, a code no verdict uses (0 PASS, 1 BLOCK or NEEDS_WORK, 2 INCONCLUSIVE). It never
carries a traceback or a finding about the PR.
"""

# EX_USAGE of sysexits.h: the command was used incorrectly
USAGE_EXIT = 64


class UsageError(Exception):
    """A caller mistake: reported as one line, exit USAGE_EXIT, no report, worktree untouched."""
