"""The namespaces --no-network and --sandbox run targets in: found working on this host, or refused.

Each check runs one harmless command (`true`, a write to a scratch folder) and returns the prefix
that worked, or a UsageError saying why none did. It never launches PR code and never touches the
worktree.
"""
from __future__ import annotations

import shutil
import tempfile

from kvtasks.system import processes
from kvtasks.errors import UsageError

# Runs first inside the mount and PID namespaces, as the namespace's first process: read-only binds,
# then writable binds inside them, then the target as its child. Once the target has exited it
# stops every other process in the namespace (kill -- -1: twice, for a child forked while the
# first went round), lists the live ones (its own /proc) into the file its first argument after the binds names
# ('' for nowhere) and exits, which ends every process left in the namespace.
SANDBOX_SCRIPT = """set -e
while [ "$1" != -- ]; do mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"; shift; done; shift
while [ "$1" != -- ]; do mount --bind "$1" "$1"; mount -o remount,bind,rw "$1"; shift; done; shift
left="$1"; shift
set +e
"$@"
status=$?
if [ -n "$left" ]; then
    kill -s STOP -- -1 2>/dev/null; kill -s STOP -- -1 2>/dev/null
    for entry in /proc/[0-9]*; do
        [ -e "$entry/exe" ] || continue  # a zombie: already dead
        command=$(tr '\\0' ' ' < "$entry/cmdline" 2>/dev/null)
        [ "${entry#/proc/}" = 1 ] || [ -z "$command" ] || printf '%s %s\\n' "${entry#/proc/}" "$command" >> "$left"
    done
fi
exit $status
"""


# the target runs in a PID namespace of its own (with its own /proc): when the namespace's first
# process exits the kernel kills every process left in it, and when its unshare dies (with the
# validator), so does that first process
PID_NAMESPACE = ("--pid", "--fork", "--kill-child", "--mount-proc")


def network_namespace() -> tuple[str, ...]:
    """The prefix that runs a command in a fresh network namespace here, or a UsageError saying why not."""
    tried = []
    for prefix in (("unshare", "--net", "--"), ("unshare", "--net", "--map-root-user", "--")):
        if shutil.which(prefix[0]) is None:
            raise UsageError("--no-network needs unshare (util-linux), which this host lacks")
        done = processes.run([*prefix, "true"], timeout_s=30)
        if done.ok:
            return prefix
        tried.append(done.said())
    raise UsageError(f"--no-network: this host cannot create a network namespace ({'; '.join(tried)})")


def mount_namespace() -> tuple[str, ...]:
    """The unshare command whose mount namespace can mount a folder read-only for one command here
    (tried on a scratch folder, in a PID namespace of its own: the write must fail), or a
    UsageError saying why not."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        raise UsageError("--sandbox needs unshare and mount (util-linux), which this host lacks")
    tried = []
    with tempfile.TemporaryDirectory(prefix="kvtasks-sandbox-check-") as folder:
        for command in (("unshare", "--mount", "--propagation", "private"),
                        ("unshare", "--mount", "--propagation", "private", "--map-root-user")):
            done = processes.run([*command, *PID_NAMESPACE, "--", "sh", "-c", SANDBOX_SCRIPT, "kvtasks-sandbox", folder, "--", "--", "",
                                  "sh", "-c", 'touch "$0/probe" 2>/dev/null && exit 3 || exit 0', folder], timeout_s=30)
            if done.ok:
                return command
            tried.append("the folder stayed writable" if done.returncode == 3 else done.said())
    raise UsageError(f"--sandbox: this host cannot mount the evidence folder read-only for targets "
                     f"({'; '.join(tried)})")
