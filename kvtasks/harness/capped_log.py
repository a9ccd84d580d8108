"""A target's output with a ceiling, enforced while it is written.

The target writes into a pipe that a thread of the launcher drains: the first half of the ceiling
goes to the log file as it comes, the last half is kept in memory as a ring and appended at the
end, after a line saying how much was cut between them. A size limit that killed the target would
turn a chatty honest test into a crash; this one only bounds what is kept.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path

_CHUNK = 1 << 16
DEFAULT_CEILING = 16 << 20  # KVTASKS_LOG_CEILING's default
CLOSE_WAIT_S = 10.0


class CappedLog:
    """The drain of one launch's output into `path`, at most `ceiling` bytes kept (plus the cut line)."""

    def __init__(self, path: Path, ceiling: int):
        self.path = path
        self.ceiling = ceiling
        self.total = 0  # every byte the target wrote
        self._head_room = ceiling - ceiling // 2
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        read_end, self.write_end = os.pipe()
        self._file = open(path, "wb")
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._drain, args=(read_end,), daemon=True)
        self._thread.start()

    @property
    def cut(self) -> int:
        """How many bytes were left out of the middle."""
        return max(0, self.total - self.ceiling)

    def started(self) -> None:
        """The child holds its own copy of the write end (or never started): ours is closed, once, so
        the drain sees the end of output once every process holding it has gone."""
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1

    def _drain(self, read_end: int) -> None:
        """Read to the end of output, whatever happens to the log file: a target whose pipe stopped
        being read would block on its next write. Once the log is closed, what still comes is read
        and dropped."""
        try:
            while chunk := os.read(read_end, _CHUNK):
                with self._lock:
                    if self._closed:
                        continue
                    self.total += len(chunk)
                    try:
                        if self._head_room:
                            head, chunk = chunk[:self._head_room], chunk[self._head_room:]
                            self._file.write(head)
                            self._head_room -= len(head)
                        if chunk:
                            self._keep_tail(chunk)
                    except (OSError, ValueError):  # the log cannot be written (a full disk): keep draining
                        continue
        finally:
            os.close(read_end)

    def _keep_tail(self, chunk: bytes) -> None:
        room = self.ceiling // 2
        self._tail.append(chunk[-room:] if room else b"")
        self._tail_bytes += len(self._tail[-1])
        while self._tail and self._tail_bytes - len(self._tail[0]) >= room:
            self._tail_bytes -= len(self._tail.popleft())

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Once the launch has been ended: wait for the end of output (at most `wait_s`: a process
        that could not be ended may hold the pipe for ever) and write the kept tail."""
        self._thread.join(wait_s)
        with self._lock:
            self._closed = True
            tail = b"".join(self._tail)
            if self.cut:
                kept_tail = tail[len(tail) - (self.ceiling // 2):] if len(tail) > self.ceiling // 2 else tail
                self._file.write(f"\n[kvtasks: {self.cut} bytes of output cut here; {self.total} written in all, "
                                 f"the first and last {self.ceiling // 2} kept]\n".encode())
                self._file.write(kept_tail)
            else:
                self._file.write(tail)
            if self._thread.is_alive():
                self._file.write(f"\n[kvtasks: the output was still open {wait_s:g}s after the launch was ended; "
                                 "nothing after this point was kept]\n".encode())
            self._file.close()
