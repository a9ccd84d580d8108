"""The lease owner: it answers every client in turn, none can wedge or kill it, and it holds none
of the validator's output open."""
import os
import socket

from kvtasks.gpu import lease, picker


def test_a_silent_or_vanished_client_neither_wedges_nor_ends_the_owner(private_gpu_locks):
    lease.start(private_gpu_locks)
    try:
        owner = lease._OWNER["process"].pid
        assert os.readlink(f"/proc/{owner}/fd/2") == "/dev/null"  # a caller reading our stderr never waits on it
        assert picker.try_lock(3) is not None
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect("\0" + lease._OWNER["name"])  # connects, never asks
        vanished = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        vanished.connect("\0" + lease._OWNER["name"])
        vanished.sendall(b'{"op": "held"}\n')
        vanished.close()  # gone before the answer
        assert [claim.index for claim in picker.held()] == [3]
        silent.close()
    finally:
        lease.stop()
