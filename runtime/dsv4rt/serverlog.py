"""server.log of a serve run: the server's stdout and stderr through a pipe, written by a thread of the job, bounded.

A server under a hostile load can log without end (one EngineDeadError traceback per failed request: 1.1 GB in two
minutes at 20,000 requests). The file keeps its head up to DSV4_SERVER_LOG_MAX_MIB (default 64 MiB: the start and the
first failures, where a root cause is), says in a line where the cap was reached, then drops lines, counting them,
and keeps the last TAIL_KEPT in memory; when the server's output ends the count and those last lines are written
after the head. A job killed meanwhile keeps the head and the cap line: every write is flushed.

The job writes its own lines into the file as well (`### dsv4: ...`, never counted against the cap): where the cap
was reached, and where the job began stopping the server (MARK: what the server logs after that is its shutdown).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path

MAX_MIB_ENV = "DSV4_SERVER_LOG_MAX_MIB"
DEFAULT_MAX_MIB = 64
TAIL_KEPT = 1000  # lines kept past the cap, and for the tail copied into raw.log
TAIL_LINE_BYTES = 4096  # a kept line is cut here (a line may hold a whole echoed prompt)
MARK = "### dsv4:"  # the judge reads these lines (dsv4ctl/judge/serve_files.py: JOB_STOP_MARK)
CHUNK = 1 << 16


def max_bytes() -> int:
    """The cap: DSV4_SERVER_LOG_MAX_MIB (a positive number) or the default."""
    try:
        mib = float(os.environ.get(MAX_MIB_ENV, DEFAULT_MAX_MIB))
    except ValueError:
        mib = DEFAULT_MAX_MIB
    return int((mib if mib > 0 else DEFAULT_MAX_MIB) * (1 << 20))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


class ServerLog:
    """The pipe (write_fd goes to the server as stdout and stderr) and the thread that copies it into the file."""

    def __init__(self, path: Path, cap_bytes: int | None = None) -> None:
        self.path, self.cap = path, max_bytes() if cap_bytes is None else cap_bytes
        self._out = open(path, "wb")
        self.read_fd, self.write_fd = os.pipe()
        self._lock = threading.Lock()
        self._last: deque[bytes] = deque(maxlen=TAIL_KEPT)
        self.written = self.lines = 0  # the server's bytes and lines in the file
        self.dropped_lines = self.dropped_bytes = 0
        self._thread = threading.Thread(target=self._copy, name="dsv4-server-log", daemon=True)
        self._thread.start()

    def started(self) -> None:
        """The server has its copy of the write end: ours goes, so the pipe ends when the server's output does."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _copy(self) -> None:
        pending = b""
        with os.fdopen(self.read_fd, "rb", buffering=0) as source:
            while True:
                try:
                    chunk = source.read(CHUNK)
                except OSError:
                    break
                if not chunk:
                    break
                *whole, pending = (pending + chunk).split(b"\n")
                with self._lock:
                    for line in whole:
                        self._line(line + b"\n")
                    if len(pending) > CHUNK * 16:  # a line without end: written in pieces
                        self._line(pending)
                        pending = b""
                    self._flush()
        with self._lock:
            if pending:
                self._line(pending + b"\n")
            self._flush()

    def _line(self, line: bytes) -> None:
        self._last.append(line[:TAIL_LINE_BYTES] + (b"\n" if len(line) > TAIL_LINE_BYTES else b""))
        if self.dropped_lines == 0 and self.written + len(line) <= self.cap:
            self._write(line)
            self.written += len(line)
            self.lines += 1
            return
        if self.dropped_lines == 0:
            self._write_mark(f"server.log reached its cap of {_mib(self.cap)} ({MAX_MIB_ENV}) at line "
                             f"{self.lines + 1}: later lines are left out; their count and the last {TAIL_KEPT} "
                             "come at the end")
        self.dropped_lines += 1
        self.dropped_bytes += len(line)

    def _write(self, data: bytes) -> None:
        if not self._out.closed:
            try:
                self._out.write(data)
            except OSError:
                pass

    def _flush(self) -> None:
        if not self._out.closed:
            try:
                self._out.flush()
            except OSError:
                pass

    def _write_mark(self, text: str) -> None:
        self._write(f"{MARK} {text}\n".encode())

    def mark(self, text: str) -> None:
        """One line of the job's own in server.log, between the server's lines."""
        with self._lock:
            self._write_mark(text)
            self._flush()

    def tail(self, n_lines: int) -> list[str]:
        with self._lock:
            return [line.decode("utf-8", "replace").rstrip("\n") for line in list(self._last)[-n_lines:]]

    def close(self, wait_s: float = 5.0) -> None:
        """Wait (a little) for the server's output to end, write the dropped count and the last lines, close."""
        self.started()
        self._thread.join(timeout=wait_s)  # an orphan still holding the pipe must not hold the job
        with self._lock:
            if self.dropped_lines:
                kept = list(self._last)[-min(TAIL_KEPT, self.dropped_lines):]
                self._write_mark(f"server.log capped at {_mib(self.cap)}: {self.dropped_lines} line(s) "
                                 f"({_mib(self.dropped_bytes)}) left out; the last {len(kept)} of them follow")
                for line in kept:
                    self._write(line)
            self._flush()
            self._out.close()
