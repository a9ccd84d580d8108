"""Every process a launch starts ends with it, found by what a daemon cannot shed.

A process group is not enough: a kernel module that double-forks and calls `setsid()` at import
leaves the target's group, clears its environment and its working directory, and would outlive
the validation, write into the tree after it was handed back, and judge the next PR. So a launch
is contained three ways, each found by the kernel rather than by anything the process controls:

- **Subreaper.** For the length of a launch the launching process is a child subreaper
  (`PR_SET_CHILD_SUBREAPER`): whatever the launch orphans, at any depth, is reparented to it
  instead of to init. Once the launch's leader has exited, the launch's processes are its
  process group, the children the launcher adopted since the leader started (a pid with a start
  time at or after the leader's that was not its child before), and their descendants. What ends
  by itself within GRACE_S is left to end; the rest is killed, and the launcher's dead children
  among them reaped by pid, one enumeration after another, until none is left: a process that
  forks between two enumerations leaves its child orphaned to the launcher, so the next finds
  it. Only those pids are reaped (a `waitpid(-1)` would race `subprocess`, which reads ECHILD as
  exit 0).
- **cgroup.** Where the host delegates cgroup v2 to the validator (its cgroup is writable), each
  launch gets a cgroup of its own that the child enters before it execs, and its end writes
  `cgroup.kill`. The cgroup is journalled with the launch's group, so the guardian, which is no
  ancestor of the targets, can end a dead validator's launches through it.
- **PID namespace.** Under `--sandbox` the target runs in a PID namespace of its own (`unshare
  --pid --fork --kill-child --mount-proc`) whose first process is the sandbox's shell: when the
  target exits, the shell stops and lists what is left (`namespace_survivors`) and exits, the
  kernel kills every process left in the namespace, and when the launcher dies, so does it.

What was still alive after the leader exited is the launch's evidence (`Survivor`): the report's
`containment.survivors`.
"""
from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kvtasks.system import cgroups, process_table, processes
from kvtasks.records import Survivor

_PR_SET_CHILD_SUBREAPER = 36
END_BOUND_S = 10.0  # the longest the enumerate-and-kill rounds go on before a survivor is said unkillable
GRACE_S = 1.0  # what exits by itself this soon after the leader is no survivor
SURVIVORS_KEPT = 20  # a process that re-forks without end is one survivor many times over: the first kept


def _prctl(option: int, value: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def _command(pid: int) -> str:
    import psutil  # here, not above: a twentieth of every validator's start, for a survivor, which is rare
    try:
        process = psutil.Process(pid)
        return " ".join(process.cmdline()) or process.name()
    except (psutil.Error, OSError):
        return "(gone before its command line was read)"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# -- a launch's watch ------------------------------------------------------------------------
@dataclass
class Watch:
    """One launch's containment, from just before its leader starts to its end."""

    cgroup: Path | None = None
    subreaper: bool = False
    children_before: set[int] = field(default_factory=set)
    leader: int | None = None
    leader_started: int | None = None  # in clock ticks since boot, as /proc says it

    def started(self, pid: int) -> None:
        """The leader started (its pid is also its process group's id)."""
        self.leader = pid
        entry = process_table.stat(pid)
        self.leader_started = entry.started if entry is not None else None

    def _scan(self) -> dict[int, tuple[str, str, int]]:
        """The launch's processes, zombies included, from one reading of the process table:
        pid -> (how it was found, its state letter, its parent). What a daemon cannot shed finds it: its
        process group as launched, the launch's cgroup, being the launcher's child by adoption
        (started no earlier than the leader, and not its child before: a process that took the
        reaped leader's pid included), or descending from one of those."""
        me = os.getpid()
        table = process_table.read()
        found: dict[int, tuple[str, str, int]] = {}
        members = set(cgroups.members(self.cgroup)) if self.cgroup is not None else set()
        for pid, entry in table.items():
            how = None
            if pid == me:
                continue
            if pid in members:
                how = "cgroup"
            elif self.leader is not None and entry.group == self.leader:
                how = "process group"
            elif self.subreaper and entry.parent == me and pid not in self.children_before \
                    and (self.leader_started is None or entry.started >= self.leader_started):
                how = "orphan"
            if how is not None:
                found[pid] = (how, entry.state, entry.parent)
        children: dict[int, list[int]] = {}
        for pid, entry in table.items():
            children.setdefault(entry.parent, []).append(pid)
        pending = list(found)
        while pending:
            for child in children.get(pending.pop(), []):
                if child not in found and child != me:
                    found[child] = ("descendant", table[child].state, table[child].parent)
                    pending.append(child)
        return found

    def _settle(self, found: dict[int, tuple[str, str, int]]) -> tuple[list[int], int]:
        """(the live processes of a scan, how many of its dead the launcher reaped: its own children
        only, by pid)."""
        alive = [pid for pid, (_, state, _) in found.items() if state != process_table.ZOMBIE]
        return alive, self._reap([pid for pid, (_, _, parent) in found.items() if parent == os.getpid()])

    def end(self, bound_s: float = END_BOUND_S, grace_s: float = GRACE_S) -> list[Survivor]:
        """After the leader has exited and been reaped: end everything the launch left alive, and
        say what that was. Returns with none of it alive, or with the ones that could not be
        ended marked so (a process stuck in the kernel).

        What exits by itself within `grace_s` of the leader (a helper that ends when its parent's
        pipe closes, multiprocessing's resource tracker) is no survivor. Then the cgroup is ended,
        and scan after scan kills what it finds alive and reaps the launcher's children that died,
        until two scans in a row find nothing alive and reap nothing. A process that forks and exits
        between scans (a daemon re-forking every few milliseconds) cannot pass for quiet: whichever
        of its line a scan misses, the one before it died as the launcher's child (reaped: not
        quiet) or as a child of one a scan finds alive."""
        survivors: dict[int, Survivor] = {}
        more = 0

        def name(pid: int, how: str, ended: str) -> None:
            nonlocal more
            if pid in survivors:
                return
            if len(survivors) < SURVIVORS_KEPT:
                survivors[pid] = Survivor(pid=pid, command=_command(pid), found_as=how, ended=ended)
            else:
                more += 1

        started = time.monotonic()
        try:
            while True:  # the grace: nothing is killed yet
                alive, reaped = self._settle(self._scan())
                if not alive or time.monotonic() - started >= grace_s:
                    break
                time.sleep(0.02)
            quiet = 0 if alive or reaped else 1
            if self.cgroup is not None:  # named first, then ended at once, whatever they do meanwhile
                for pid in cgroups.members(self.cgroup):
                    name(pid, "cgroup", "cgroup.kill")
                cgroups.end(self.cgroup)
            deadline = time.monotonic() + bound_s
            while quiet < 2:
                found = self._scan()
                alive, reaped = self._settle(found)
                if time.monotonic() >= deadline:
                    for pid in alive:
                        name(pid, found[pid][0], f"still alive after {bound_s:g}s of SIGKILL")
                    break
                for pid in alive:
                    name(pid, found[pid][0], "SIGKILL")
                    _signal(pid, signal.SIGKILL)
                quiet = 0 if alive or reaped else quiet + 1
        finally:
            self.release()
        kept = list(survivors.values())
        if more:
            kept.append(Survivor(pid=0, command=f"{more} more processes of the same launch", found_as="orphan",
                                 ended="SIGKILL"))
        return kept

    @staticmethod
    def _reap(pids: list[int]) -> int:
        """Reap the launcher's children that have died, by pid, never waitpid(-1); how many."""
        reaped = 0
        for pid in pids:
            try:
                reaped += os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                pass
        return reaped

    def release(self) -> None:
        """The launch is over: the launcher adopts no more orphans."""
        if self.subreaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
            self.subreaper = False
        if self.cgroup is not None and self.cgroup.is_dir():
            try:
                self.cgroup.rmdir()
            except OSError:
                cgroups.end(self.cgroup)


def watch() -> Watch:
    """Before a launch's leader starts: become a subreaper, note the children already here, and
    make the launch's cgroup where the host allows one."""
    me = os.getpid()
    children = {pid for pid, entry in process_table.read().items() if entry.parent == me}
    return Watch(cgroup=cgroups.make(), subreaper=_prctl(_PR_SET_CHILD_SUBREAPER, 1), children_before=children)


def namespace_survivors(listing: Path) -> list[Survivor]:
    """What a sandboxed launch's PID namespace still held once its target had exited, as the
    namespace's first process listed it (kvtasks.request.namespaces); the namespace's end ended them."""
    try:
        lines = listing.read_text(errors="replace").splitlines()
    except OSError:
        return []
    survivors = []
    for line in lines[:SURVIVORS_KEPT]:
        pid, _, command = line.partition(" ")
        if pid.isdigit():
            survivors.append(Survivor(pid=int(pid), command=command.strip(), found_as="pid namespace",
                                      ended="the PID namespace ended (SIGKILL)"))
    return survivors


def end_launch(process: subprocess.Popen, contained: Watch) -> list[Survivor]:
    """The launch's leader is done (exited, or its group killed): end everything it started that is
    still alive, say what that was, and tell the `ended` observers."""
    process.wait()
    survivors = contained.end()
    for observer in list(processes.ended):
        observer()
    return survivors


def launched(argv: Sequence[str], timeout_s: float, started: Callable[[], None] = lambda: None,
             beat: Callable[[], None] | None = None, **options) -> tuple[subprocess.Popen, bool, list[Survivor]]:
    """Run `argv` contained to its end or to `timeout_s` (its group killed then): (the process,
    whether it timed out, what it left alive and was ended). `started` runs once the child holds
    what `options` gave it, before the wait, and `beat` as the wait goes on; an interrupt kills the
    group and still ends the launch."""
    contained = watch()
    try:
        process = processes.popen(argv, track=True, contained=contained, **options)
    except BaseException:
        contained.release()
        raise
    try:
        started()
        timed_out = processes.wait_or_expire(process, timeout_s, beat=beat)
    except BaseException:
        processes.kill_group(process)
        end_launch(process, contained)
        raise
    return process, timed_out, end_launch(process, contained)


def run(argv: Sequence[str], *, timeout_s: float, cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None, text: bool = True, errors: str = "surrogateescape",
        stdin_bytes: bytes | None = None) -> processes.Finished:
    """`processes.run` for a command that runs the checkout's code, contained: its output goes to
    files, not pipes (a process it left behind holding a pipe would keep a read waiting), the
    leader is waited for, then whatever it started is ended and the output read."""
    begun = time.monotonic()
    given = processes.stdin_file(stdin_bytes)
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        try:
            process, timed_out, survivors = launched(
                argv, timeout_s, cwd=cwd, env=None if env is None else dict(env),
                stdin=subprocess.DEVNULL if given is None else given, stdout=out_file, stderr=err_file)
        finally:
            if given is not None:
                given.close()
        outputs = []
        for kept in (out_file, err_file):
            kept.seek(0)
            data = kept.read()
            outputs.append(data.decode(errors=errors) if text else data)
    return processes.Finished(argv=list(argv), returncode=None if timed_out else process.returncode,
                              stdout=outputs[0], stderr=outputs[1], timed_out=timed_out, timeout_s=timeout_s,
                              duration_s=round(time.monotonic() - begun, 3), survivors=survivors)
