"""The lease owner: one process per validator holds its GPU claims for as long as the validator runs.

Under `doit -n K` stages run in K forked workers; a claim (a flock on gpu-<index>.lock) taken in
the worker that ran gpu_claim would be freed when that worker exits, while another worker still
runs targets on the device, and a second worker could not take the claim its own validator holds.
So the validator starts an owner process before any worker forks; workers ask it, over an
abstract Unix socket (no file to leave behind; only the owner's own user is answered), to take a
claim, and every worker of the validator shares what it holds. The owner dies with the validator
(PR_SET_PDEATHSIG), and the kernel drops its locks then.

Workers of one validator also take turns on a claimed device (`turn`, a mutex that is an abstract
socket name, released by the kernel when its holder dies): a worker that finds the device busy
with another worker's target waits for it, bounded and said in progress, rather than running
GPU-less, so `-n K` never changes a verdict.

    python -m kvtasks.gpu.lease NAME LOCK_DIR     (started by `start`; answers one JSON line per connection)
"""
from __future__ import annotations

import atexit
import errno
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from kvtasks.system import locks, processes

_OWNER: dict = {}  # {"name": abstract socket name, "process": Popen, "pid": starter}; inherited by forked workers
_TURN_POLL_S = 0.2
_CLIENT_S = 5.0  # what the owner waits for one client's question


def running() -> bool:
    return bool(_OWNER)


def start(lock_dir: Path) -> None:
    """Start this validator's owner (once); workers forked afterwards share it."""
    if _OWNER:
        return
    name = f"kvtasks-lease-{os.getpid()}-{secrets.token_hex(8)}"
    # no stderr of ours: a caller waits for the end of the validator's output, and an owner still
    # holding it (for the moment it takes to die with us) would hold that caller too
    process = processes.popen([sys.executable, "-m", "kvtasks.gpu.lease", name, str(lock_dir)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if process.stdout.readline().strip() != "ready":
        processes.kill_group(process)
        raise RuntimeError("the GPU lease owner did not start")
    _OWNER.update(name=name, process=process, pid=os.getpid())
    atexit.register(stop)  # doit's own exit; forked workers leave through os._exit and skip it


def stop() -> None:
    """End the owner (its claims go with it); only the process that started it may."""
    if not _OWNER or _OWNER["pid"] != os.getpid():
        return
    processes.kill_group(_OWNER["process"], grace_s=1.0)
    _OWNER["process"].stdout.close()
    _OWNER.clear()


def ask(request: dict) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(30)
        connection.connect("\0" + _OWNER["name"])
        connection.sendall(json.dumps(request).encode() + b"\n")
        answer = _read_line(connection)
    return json.loads(answer)


def _read_line(connection: socket.socket) -> bytes:
    """One newline-terminated message (or what came before the peer closed)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@contextmanager
def turn(visible_devices: Mapping[str, str], bound_s: float, say=None) -> Iterator[None]:
    """This worker's turn on the claimed device: wait (up to bound_s, saying so) while another
    worker of this validator runs a target on it. Nothing to wait for without a device or owner."""
    devices = sorted({value for value in visible_devices.values() if value})
    if not _OWNER or not devices:
        yield
        return
    mutex = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        started = time.monotonic()
        said = 0.0
        while True:
            try:
                mutex.bind(f"\0{_OWNER['name']}-turn-{'-'.join(devices)}")
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                waited = time.monotonic() - started
                if waited > bound_s:
                    raise TimeoutError(f"waited {waited:.0f}s for GPU {','.join(devices)}, which another worker of "
                                       "this validator kept; no target ran without it") from None
                if say is not None and waited - said >= 10:
                    said = waited
                    say(f"waiting for GPU {','.join(devices)}: another worker of this validator is running a "
                        f"target on it ({waited:.0f}s of at most {bound_s:.0f}s)")
                time.sleep(_TURN_POLL_S)
        yield
    finally:
        mutex.close()


# -- the owner process ----------------------------------------------------------------------------

def serve(name: str, lock_dir: str) -> None:
    held: dict[int, dict] = {}  # index -> {"fd", "path", "basis"}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(16)
    print("ready", flush=True)
    while True:
        connection, _ = server.accept()
        with connection:
            # one client at a time: a silent one may hold the others up this long, never forever
            connection.settimeout(_CLIENT_S)
            try:
                _serve_one(connection, held, Path(lock_dir))
            except OSError:
                pass  # the client went away (a worker killed mid-question): its claims stay held


def _serve_one(connection: socket.socket, held: dict[int, dict], lock_dir: Path) -> None:
    credentials = struct.Struct("3i")
    _, uid, _ = credentials.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, credentials.size))
    if uid != os.getuid():
        return
    data = _read_line(connection)
    try:
        answer = _answer(json.loads(data), held, lock_dir)
    except (ValueError, KeyError, OSError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    connection.sendall(json.dumps(answer).encode() + b"\n")


def _answer(request: dict, held: dict[int, dict], lock_dir: Path) -> dict:
    op = request["op"]
    if op == "lock":
        index = int(request["index"])
        if index not in held:
            lock = lock_dir / f"gpu-{index}.lock"
            fd = locks.try_hold(lock)
            if fd is None:
                return {"locked": False}
            held[index] = {"fd": fd, "path": str(lock), "basis": "unknown"}
        return {"locked": True, "path": held[index]["path"], "basis": held[index]["basis"]}
    if op == "basis":
        held[int(request["index"])]["basis"] = request["basis"]
        return {}
    if op == "held":
        return {"held": [[index, entry["path"], entry["basis"]] for index, entry in held.items()]}
    if op == "release":
        entry = held.pop(int(request["index"]), None)
        if entry is not None:
            os.close(entry["fd"])
        return {}
    raise KeyError(f"unknown request {op!r}")


if __name__ == "__main__":
    serve(*sys.argv[1:3])
