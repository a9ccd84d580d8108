"""Every process kvtasks starts: a timeout, its own process group, killed whole, dying with us.

A child runs in a new session (its own process group), so a timeout, an interrupt or the end of
the run can kill everything it started, grandchildren included. It also gets PR_SET_PDEATHSIG
(all but the read-only git queries, which end by themselves and change nothing): when the process
that started it dies, even by SIGKILL, the kernel kills it too. What survives
that (a grandchild in the group) is killed by the next run's recovery, which finds the group in
the worktree's journal: `spawned` observers (the journal, while a tree is lent) hear of every
tracked group as it starts.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import select
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Mapping, Sequence

if TYPE_CHECKING:
    # an annotation only: the helpers that import this module (the GPU lease owner, the guardian's
    # recovery) start in a fresh interpreter, and the records' pydantic models would add most of
    # their start-up time
    from kvtasks.system.containment import Watch
    from kvtasks.records import Survivor

KILL_GRACE_S = 5.0
SIGNAL_SLICE_S = 0.5  # the longest a wait of ours stays out of Python, where signal handlers run
_PR_SET_PDEATHSIG = 1

# called with (pgid, start time, cgroup folder or None) for every tracked launch; the worktree's
# journal listens while lent
spawned: list[Callable[[int, int | None, str | None], None]] = []
# called with no arguments once a tracked launch and everything it started have ended: a lent tree
# checks its repository's own files then, before kvtasks' next git call reads them
ended: list[Callable[[], None]] = []


@dataclass
class Finished:
    argv: list[str]
    returncode: int | None  # None when it was killed for running past its timeout
    stdout: str
    stderr: str
    timed_out: bool
    timeout_s: float
    duration_s: float
    survivors: list[Survivor] = field(default_factory=list)  # a contained run's (kvtasks.system.containment)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def said(self, width: int = 300) -> str:
        """Why it failed, in one line: the timeout, or the last line it printed."""
        if self.timed_out:
            return f"timed out after {self.timeout_s:g}s; its process group was killed"
        last = ((self.stderr or "").strip().splitlines() or (self.stdout or "").strip().splitlines()
                or [f"exit {self.returncode}"])[-1]
        return last[-width:]


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None if gone.

    A pid can be reused; a pid together with its start time names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has already died
        return None
    return int(fields[19])


def alive(pid: int, started: int | None) -> bool:
    """Whether the process that had this pid and start time still runs."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def _die_with_parent(parent: int, cgroup: Path | None = None) -> Callable[[], None]:
    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(137)
        if cgroup is not None:  # its launch's cgroup, entered before it execs (kvtasks.system.containment)
            try:
                with open(cgroup / "cgroup.procs", "w") as procs:
                    procs.write("0")
            except OSError:  # a host that refuses the move: the subreaper and the group still end the launch
                pass
    return arm


def die_with_parent() -> None:
    """Arm PR_SET_PDEATHSIG for this process (a forked worker whose parent is the validator)."""
    _die_with_parent(os.getppid())()


def popen(argv: Sequence[str], *, track: bool = False, outlives_us_harmlessly: bool = False,
          contained: "Watch | None" = None, **options) -> subprocess.Popen:
    """Start `argv` in its own session, armed to die with this process; `contained`, in its
    launch's containment (its cgroup entered before it execs).

    A command that only reads and ends by itself (a git query) may go unarmed: arming it takes
    Python code in the forked child, which rules out vfork, and a fork of a large validator
    (a worker that imported torch) costs milliseconds that every one of a validation's dozens of git
    calls would pay."""
    cgroup = contained.cgroup if contained is not None else None
    arm = None if outlives_us_harmlessly else _die_with_parent(os.getpid(), cgroup)
    process = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=arm, **options)
    if contained is not None:
        contained.started(process.pid)
    if track:
        try:
            started = start_time(process.pid)
            for observer in list(spawned):
                observer(process.pid, started, str(cgroup) if cgroup is not None else None)
        except BaseException:  # an interrupt before the caller holds the process: nobody else would kill it
            kill_group(process)
            raise
    return process


def _exits_within(process: subprocess.Popen, seconds: float, beat: Callable[[], None] | None = None) -> bool:
    """Wait up to `seconds` for the process to exit (reaping it); say whether it did.

    It returns the moment the process exits (a pidfd polled, where Popen.wait(timeout) sleeps up to
    50 ms at a time, which every target launch would pay at its end), and to Python at least every
    SIGNAL_SLICE_S: the kernel may give a signal sent to the validator to another thread (a
    library's helper thread, such as multiprocessing's queue feeder in a doit worker), which never
    wakes the main thread's wait; its handler runs only when the main thread next runs Python.
    `beat`, when given, runs at each of those returns."""
    deadline = time.monotonic() + seconds
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:  # gone and reaped already
        process.wait()
        return True
    except OSError:  # no pidfd here (an old kernel, a sandbox's seccomp filter): Popen's own wait, in slices
        while True:
            try:
                process.wait(timeout=max(0.0, min(SIGNAL_SLICE_S, deadline - time.monotonic())))
                return True
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    return False
                if beat is not None:
                    beat()
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll(max(0.0, min(SIGNAL_SLICE_S, deadline - time.monotonic())) * 1000):
            if time.monotonic() >= deadline:
                return False
            if beat is not None:
                beat()
    finally:
        os.close(pidfd)
    process.wait()
    return True


def wait_or_expire(process: subprocess.Popen, timeout_s: float, grace_s: float = KILL_GRACE_S,
                   beat: Callable[[], None] | None = None) -> bool:
    """Wait for the process; past timeout_s, terminate its group (killed after grace_s) and return True.
    `beat` is called as the wait goes on (at least every SIGNAL_SLICE_S), to say how far a long run got."""
    if _exits_within(process, timeout_s, beat):
        return False
    signal_group(process.pid, signal.SIGTERM)
    if not _exits_within(process, grace_s):
        signal_group(process.pid, signal.SIGKILL)
        process.wait()
    return True


def kill_group(process: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """Terminate the process's whole group: nothing it started may outlive it."""
    if process.poll() is None:
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    signal_group(process.pid, signal.SIGKILL)
    process.wait()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def kill_orphaned_group(pgid: int, started: int | None) -> list[int]:
    """Kill what is left of a recorded group (a dead validator's, or one a lend launched); return
    the pids killed.

    Linux never hands out a pid while it is still some group's id, so members with this group id
    belong to the recorded group, unless its leader is alive with another start time (the pid
    was reused after the whole group had gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # the usual case, answered without reading /proc
    except PermissionError:
        pass
    leader = start_time(pgid)
    if leader is not None and started is not None and leader != started:
        return []
    members = group_members(pgid)
    if members:
        signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_GRACE_S
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)
    return members


def _communicate(process: subprocess.Popen, deadline: float) -> tuple:
    """Popen.communicate up to `deadline` (monotonic), back in Python every SIGNAL_SLICE_S so a
    signal another thread received is handled (see `_exits_within`); retrying loses no output."""
    while True:
        try:
            return process.communicate(timeout=max(0.0, min(SIGNAL_SLICE_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise


def run(argv: Sequence[str], *, timeout_s: float, cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None, stdout: int | IO = subprocess.PIPE,
        stderr: int | IO = subprocess.PIPE, text: bool = True,
        errors: str = "surrogateescape", stdin_bytes: bytes | None = None,
        outlives_us_harmlessly: bool = False) -> Finished:
    """Run to completion or to `timeout_s`; either way the whole group is gone afterwards (a run of
    the checkout's code is `kvtasks.system.containment.run`, which also ends what left the group).

    `stdin_bytes` is what it reads on its standard input (nothing otherwise)."""
    started = time.monotonic()
    given = stdin_file(stdin_bytes)
    try:
        process = popen(argv, outlives_us_harmlessly=outlives_us_harmlessly, cwd=cwd,
                        env=None if env is None else dict(env), stdin=subprocess.DEVNULL if given is None else given,
                        stdout=stdout, stderr=stderr, text=text, errors=errors if text else None)
    finally:
        if given is not None:
            given.close()  # the child holds its own copy
    timed_out = False
    try:
        out, err = _communicate(process, started + timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(process)
        out, err = process.communicate()
    except BaseException:
        kill_group(process)
        raise
    else:
        signal_group(process.pid, signal.SIGKILL)  # what it left running in its group
    return Finished(argv=list(argv), returncode=None if timed_out else process.returncode, stdout=out or "",
                    stderr=err or "", timed_out=timed_out, timeout_s=timeout_s,
                    duration_s=round(time.monotonic() - started, 3))


def stdin_file(stdin_bytes: bytes | None) -> IO | None:
    """What a child reads on its standard input: a file, not a pipe, since the waits retry and
    input would be sent once."""
    if stdin_bytes is None:
        return None
    given = tempfile.TemporaryFile()
    given.write(stdin_bytes)
    given.seek(0)
    return given
