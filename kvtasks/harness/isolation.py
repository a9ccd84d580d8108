"""What a run's isolation is, as the report states it: how processes are contained, the network,
the sandbox, and which host variables a target is given. Read from the request and the host; runs
nothing."""
from __future__ import annotations

import os

from kvtasks import variables
from kvtasks.system import cgroups
from kvtasks.harness import environment
from kvtasks.records import TargetEnvironment
from kvtasks.request import Request


def passed_through_values() -> dict[str, str]:
    """The host variables a target gets from the caller, with their values (never a credential)."""
    return {name: os.environ[name] for name in variables.passed_through(os.environ)}


def isolation_facts(request: Request) -> dict:
    network = f"none: a fresh network namespace ({' '.join(request.network_namespace[:-1])})" if request.no_network \
        else "host network (--no-network was not given)"
    if request.sandbox:
        sandbox = (f"evidence read-only: targets run in a mount namespace ({' '.join(request.sandbox_namespace)}) "
                   f"where {', '.join(request.readonly) or 'the workspace'} is mounted read-only; the tree under test "
                   "and the run's scratch stay writable")
    else:
        sandbox = ("none (--sandbox was not given): targets run as the validator's user and could write "
                   "wherever it can, the evidence store included; they never see it on a path kvtasks gives them")
    cgroup = "a cgroup v2 per launch (cgroup.kill), " if cgroups.cgroup_root() is not None else \
        "no cgroup (this host delegates none to the validator), "
    contained = ("every launch is ended whole once its leader exits: its process group, "
                 + cgroup + "the launcher as child subreaper for what left both"
                 + (", and a PID namespace per launch (--sandbox)" if request.sandbox else ""))
    return {
        "processes": contained,
        "level": "git-worktree + private caches" + (" + network namespace" if request.no_network else "")
                 + (" + read-only evidence (mount namespace)" if request.sandbox else ""),
        "container": False,
        "network": network,
        "sandbox": sandbox,
        "reason": "targets run in the supplied worktree under a constructed environment with private per-phase "
                  "caches in a scratch folder outside the evidence store",
        "target_environment": TargetEnvironment(
            passed_through=variables.passed_through(os.environ),
            given=list(environment.given_pairs(request.env))).model_dump(),
    }
