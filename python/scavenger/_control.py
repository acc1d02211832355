"""Requests from the node daemon to this worker, read from the telemetry socket.

The daemon writes one JSON object per line on the worker's own connection
(telemetry/control.go). Two kinds: "checkpoint" — finish step after_step,
have rank 0 write a checkpoint into dir, acknowledge, and exit so that the
job can be relaunched at another configuration; and "stored" — the daemon
is done with the first `lines` lines this worker wrote on the connection
(their step records are stored), so the client can forget them.

ControlState only parses and keeps state; the client's sender thread feeds it
the bytes it reads and the training loop asks it at step boundaries.
"""

import json
import threading
from typing import Any, Dict, Optional

CHECKPOINT = "checkpoint"
STORED = "stored"
MAX_LINE = 64 << 10
# The daemon's confirmations, one a connection every few milliseconds, are
# read without json: the start it writes them with (telemetry.StoredLine).
_STORED = b'{"v":1,"kind":"stored","id":"","job":"","attempt":0,"lines":'


class ControlState:
    """The newest pending request of the daemon, fed from the socket's bytes."""

    def __init__(self, attempt: int):
        self._attempt = attempt
        self._lock = threading.Lock()
        self._buf = b""
        self._pending: Optional[Dict[str, Any]] = None
        self.ignored = 0
        # Lines of the current connection the daemon confirmed; the sender
        # thread (the only one that feeds) reads it (new_connection resets it).
        self.stored = 0

    def feed(self, data: bytes) -> None:
        """Take bytes read from the socket; complete lines become requests."""
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            self._take(line)
        if len(self._buf) > MAX_LINE:  # a line that never ends: drop it
            self._buf = b""
            self.ignored += 1

    def _take(self, line: bytes) -> None:
        if line.startswith(_STORED) and line.endswith(b"}"):
            digits = line[len(_STORED):-1]
            if digits.isdigit():
                self.stored = max(self.stored, int(digits))
                return
        try:
            msg = json.loads(line)
        except ValueError:
            self.ignored += 1
            return
        if isinstance(msg, dict) and msg.get("kind") == STORED:
            lines = msg.get("lines")
            if isinstance(lines, int) and not isinstance(lines, bool) and lines > self.stored:
                self.stored = lines
            return
        if (not isinstance(msg, dict) or msg.get("kind") != CHECKPOINT
                or msg.get("attempt") != self._attempt or not isinstance(msg.get("id"), str)
                or not isinstance(msg.get("after_step", 0), int)):
            self.ignored += 1
            return
        with self._lock:
            self._pending = msg

    def new_connection(self) -> None:
        """Forget what the previous connection left: a partial line, its confirmations."""
        self._buf = b""
        self.stored = 0

    def request(self) -> Optional[Dict[str, Any]]:
        """The pending checkpoint request (id, after_step, dir), or None."""
        with self._lock:
            return dict(self._pending) if self._pending else None

    def due(self, step: int) -> bool:
        """True when a checkpoint is pending and step (the last one completed) has reached it."""
        with self._lock:
            return self._pending is not None and step >= int(self._pending.get("after_step", 0))

    def clear(self) -> Optional[Dict[str, Any]]:
        """Forget the pending request and return it."""
        with self._lock:
            req, self._pending = self._pending, None
            return req
