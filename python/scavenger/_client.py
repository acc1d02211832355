"""The telemetry client: step records to the node daemon, never blocking training.

step() appends a tuple to a bounded deque and writes what is queued (a few
records; more, from a loop of short steps, are the sender thread's) to the
unix socket SCAV_SOCKET itself, as newline-delimited JSON (the wire format of
telemetry/record.go, written by _wire.py): one non-blocking write from the
training thread, spaced so that writing costs it about DIRECT_SHARE of its
time, and at least every DIRECT_MOST seconds. A step that takes that long or
longer has its record in the kernel's socket buffer when step() returns,
where the daemon reads it even if the worker is killed next; the daemon, not
the client, gathers records into batches (daemon/ingest). Everything that
may wait (a connection, a reconnection with exponential backoff, a full socket, a
backlog, the daemon's confirmations and requests) is one daemon thread's,
which wakes every flush interval (a tenth of a second; at once when half
the queue is full or an acknowledgement waits). A wake of that thread takes
the GIL from training, which is what a thread costs a step: it wakes
rarely and has little to do (docs/bench-telemetry.md). Records a failed write did not
deliver (the daemon went away) are spooled and sent first on the next
connection. The hello asks the daemon to confirm what it stored (a "stored"
line naming how many lines of the connection it is done with): every step
record written stays with the client until confirmed, and those a
connection did not confirm before it broke are sent again on the next one,
so a daemon killed mid-write loses nothing. While no daemon answers, records spill to files in the job's
spool directory ($SCAV_CHECKPOINT_DIR/.scavenger-spool) once they are
SPILL_AFTER old or past half the queue's size, so memory stays bounded,
nothing is dropped, and a worker killed meanwhile (a restarted daemon stops
the workers it cannot reattach to, and resumes from the last checkpoint)
loses at most the records of its last SPILL_AFTER and flush interval: the client
sends them first when a daemon answers again, and what is still there when
the worker ends is the daemon's to publish (daemon/jobs/spool.go). Each file
is claimed by a rename before it is read, by the client or the daemon, so a
record goes one way only. close() takes at most its timeout: a write still
blocked on a daemon that does not read (its store holds) three quarters of the
way through has the connection ended under it, and the records the socket did
not take whole go to the spool directory too, not down with the interpreter.
Without a spool directory, or when the deque is full between two flushes, new
records are dropped and counted. Each new
connection starts with a hello line naming the client's session (a random
id): a record sent again after a stall carries the same session and step,
and the daemon stores it once. A daemon that ends a connection at once (it
does not know the attempt yet: it is restarting) is asked again with
back-off, reset once it confirms records. A connection with nothing to carry
gets an empty line every KEEPALIVE seconds (the daemon ends silent ones).
The thread also reads the daemon's requests from the same connection (see
_control.py) and sends the worker's acknowledgements. A NaN or infinite loss
is sent as "NaN", "Infinity" or "-Infinity" (JSON has none), never dropped.

When the launcher names a pre-emption signal (SCAV_PREEMPT_SIGNAL, e.g. USR1
under Slurm's --signal), the client handles that signal, unless the script
handles it itself: the handler queues a "preempt" line, and the daemon answers
with a checkpoint request, as for any move, then relaunches the job.
"""

import collections
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, Optional

from ._control import ControlState
from ._env import Config
from ._wire import MAX_RECORD_BYTES, SCHEMA_VERSION, encode, encode_step, step_prefix  # noqa: F401

SPOOL_DIR = ".scavenger-spool"  # in SCAV_CHECKPOINT_DIR; the daemon reads it (daemon/jobs/spool.go)

class NoopClient:
    """The client outside Scavenger: every call does nothing."""

    def step(self, samples: Any = None, loss: Any = None, **fields: Any) -> None:
        """Do nothing."""

    def stats(self) -> Dict[str, int]:
        """All counters zero."""
        return {"sent": 0, "dropped": 0, "queued": 0, "spilled": 0, "unconfirmed": 0}

    def close(self, timeout: float = 1.0, exit_code: Optional[int] = None) -> None:
        """Do nothing."""

    def should_checkpoint(self) -> bool:
        """Never: nobody asks outside Scavenger."""
        return False

    def checkpoint_request(self) -> Optional[Dict[str, Any]]:
        """None: nobody asks outside Scavenger."""
        return None

    def acknowledge(self, checkpoint: Optional[str] = None) -> None:
        """Do nothing."""


class Client:
    """Sends one step record per step() to the node daemon's unix socket.

    timed says whether the step clock starts now; when False the first step has
    no dt. Counters: sent (written to the socket), dropped (queue full, write
    failed, unencodable, or still queued at close), queued.
    """

    BACKOFF_MIN = 0.05
    BACKOFF_MAX = 2.0
    WRITE_TIMEOUT = 5.0
    SPILL_AFTER = 0.25  # seconds a record waits for a daemon before it goes to a file
    CONFIRM_WAIT = 0.5  # seconds close() waits, at most, for the daemon to confirm the last records
    EOF_WAIT = 0.2  # seconds a broken connection is read for the daemon's last confirmations
    KEEPALIVE = 30.0  # seconds of silence after which an empty line tells the daemon the worker lives
    # The training thread's own writes are spaced by what they cost it (the
    # encoding and the write: about 100 us on a 2-core VM, step_cost.py's
    # "spaced"; far less on a fast machine): DIRECT_SHARE of its time, the spacing within [DIRECT_LEAST,
    # DIRECT_MOST] seconds. Shorter steps share a write: a record of the
    # last spacing before a kill may be lost with its worker.
    DIRECT_SHARE = 0.01
    DIRECT_LEAST = 0.001
    DIRECT_MOST = 0.005
    DIRECT_MAX = 8  # records it writes itself at most; more (a loop of short steps) wake the sender
    FLUSH_INTERVAL = 0.1  # seconds between the sender thread's wakes, by default

    def __init__(self, config: Config, queue_size: int = 4096, flush_interval: float = FLUSH_INTERVAL,
                 timed: bool = True):
        self._config = config
        self._header = {"v": SCHEMA_VERSION, "job": config.job, "attempt": config.attempt,
                        "rank": config.rank, "world": config.world}
        self._defaults = {"local_batch": config.local_batch, "global_batch": config.global_batch}
        self._prefix = step_prefix(self._header)
        self._queue: collections.deque = collections.deque()
        self._capacity = max(1, queue_size)
        self._half = max(1, self._capacity // 2)  # a queue this long wakes the sender at once
        self._interval = flush_interval
        self._step = config.start_step
        self._last = time.perf_counter() if timed else None
        self._dropped_full = 0  # written by step() only
        self._dropped_send = 0  # written under _wlock (by the sender thread, or step() holding it)
        self._sent = 0
        self._closed = False
        self._sock: Optional[socket.socket] = None
        # Held by whoever writes on the connection or changes it: the sender
        # thread, and step() when it writes its records itself (it never
        # waits for it). _partial is the rest of a write the socket took in
        # part: written before anything else.
        self._wlock = threading.RLock()
        self._partial = b""
        self._sent_at = 0.0  # when step() last wrote (perf_counter)
        self._write_cost = self.DIRECT_LEAST * self.DIRECT_SHARE  # seconds a write took step(), averaged
        self._direct_every = self.DIRECT_LEAST  # seconds between step()'s writes
        self._backoff = self.BACKOFF_MIN
        self._retry_at = 0.0
        self._last_write = 0.0  # when the connection last carried a line (monotonic)
        # Names this client to the daemon: a record sent again after a stall
        # carries the same session and step, and is stored once.
        self._session = os.urandom(8).hex()
        self._acks: collections.deque = collections.deque()
        # Step records written on this connection and not yet confirmed
        # stored, as (line number on the connection, line); _lines counts
        # the lines written on it, the hello included.
        self._unconfirmed: collections.deque = collections.deque()
        self._lines = 0
        self._left = 0  # records left, unconfirmed, with a live daemon at close
        self._close_wait = self.CONFIRM_WAIT
        # Encoded records a failed write left unsent: sent first on the next
        # connection (bounded like the queue: the oldest go first when full).
        self._spool: collections.deque = collections.deque()
        self.control = ControlState(config.attempt)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set to flush before the interval is over
        # Set by close() when the sender is still writing to a daemon that
        # does not read (its store holds) as close's time runs out: the
        # connection is ended under the write, and what it did not take goes
        # to the spool directory, not lost with the interpreter.
        self._abort = threading.Event()
        self.preempted = 0  # pre-emption signals received
        self.spooled = 0  # records left in the spool directory at close
        # Files this worker spilled and has not sent yet, oldest first, with
        # their record counts; _seq numbers them.
        self._spilled: collections.deque = collections.deque()
        self._seq = 0
        self._spill_at: Optional[float] = None  # when the waiting records go to a file
        self._spill_dir = os.path.join(config.checkpoint_dir, SPOOL_DIR) if config.checkpoint_dir else ""
        self._exit_code: Optional[int] = None  # the worker's exit status, when close is given it
        self._preempt_restore = None  # (signal, handler before ours) to put back at close
        self._install_preempt(config.preempt_signal)
        self._thread = threading.Thread(target=self._run, name="scavenger-telemetry", daemon=True)
        self._wake.set()  # connect at once: the first steps' records are written by step() too
        self._thread.start()

    def _install_preempt(self, name: str) -> None:
        """Handle the scheduler's pre-emption signal, unless the script already does."""
        if not name:
            return
        full = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
        try:
            sig = signal.Signals[full]
            previous = signal.getsignal(sig)
            if previous not in (signal.SIG_DFL, None):
                return
            signal.signal(sig, self._on_preempt)
            self._preempt_restore = (sig, previous)
        except (KeyError, ValueError, OSError) as e:  # unknown name; not the main thread
            print(f"scavenger: cannot handle SCAV_PREEMPT_SIGNAL={name!r} ({e}); "
                  "a pre-emption will end this job without a checkpoint", file=sys.stderr)

    def _on_preempt(self, signum: int, _frame: Any) -> None:
        """Queue the notice; the sender thread writes it within a flush interval."""
        self.preempted += 1
        line = encode(dict(self._header, kind="preempt", step=self._step, t=time.time(),
                           id=signal.Signals(signum).name))
        if line is not None:
            self._acks.append(line)

    def step(self, samples: Any = None, loss: Any = None, **fields: Any) -> None:
        """Queue the record of the step that just ended; drop it when the queue is full."""
        now = time.perf_counter()
        if "dt" not in fields and self._last is not None:
            fields["dt"] = now - self._last
        self._last = now
        self._step += 1
        if self._closed or len(self._queue) >= self._capacity:
            self._dropped_full += 1
            return
        self._queue.append((self._step, time.time(), samples, loss, fields))
        if now - self._sent_at >= self._direct_every and self._sock is not None:
            if len(self._queue) <= self.DIRECT_MAX:
                self._send_direct(now)
            else:
                self._sent_at = now
                self._wake.set()
        if len(self._queue) >= self._half and not self._wake.is_set():
            self._wake.set()

    def _send_direct(self, now: float) -> None:
        """Write the queued records now, from the training thread, when nothing
        waits to be written before them and the socket takes them at once: a
        record is in the socket's buffer when its step() returns (a worker
        killed then loses nothing), and the sender thread need not wake for
        it. It never waits: while the sender writes, or the socket is full,
        the records stay queued for the sender."""
        if not self._wlock.acquire(blocking=False):
            self._wake.set()  # the sender writes: it goes round once more, for these
            return
        try:
            self._sent_at = now
            sock = self._sock
            if (sock is None or self._partial or self._spool or self._spilled or self._acks
                    or len(self._unconfirmed) >= self._capacity):
                return
            lines = self._encode_lines()
            if not lines:
                return
            data = b"".join(lines)
            try:
                n = os.write(sock.fileno(), data)  # the socket is non-blocking (it has a timeout)
            except OSError:  # full (BlockingIOError), or broken: the sender takes them
                n = 0
            if n == 0:
                self._spool.extendleft(reversed(lines))
                return
            self._partial = data[n:]
            self._track(lines, 0)
            self._sent += len(lines)
            self._last_write = time.monotonic()
            self._write_cost += 0.1 * (time.perf_counter() - now - self._write_cost)
            self._direct_every = min(self.DIRECT_MOST, max(self.DIRECT_LEAST, self._write_cost / self.DIRECT_SHARE))
        finally:
            self._wlock.release()

    def should_checkpoint(self) -> bool:
        """True when the daemon asked for a checkpoint and the step it named is done."""
        return self.control.due(self._step)

    def checkpoint_request(self) -> Optional[Dict[str, Any]]:
        """The daemon's pending checkpoint request (id, after_step, dir), or None."""
        return self.control.request()

    def acknowledge(self, checkpoint: Optional[str] = None) -> None:
        """Tell the daemon this worker has done what it asked (rank 0 names the checkpoint)."""
        req = self.control.clear()
        if req is None:
            return
        rec = dict(self._header, kind="ack", id=req["id"], step=self._step, t=time.time())
        if checkpoint:
            rec["checkpoint"] = str(checkpoint)
        line = encode(rec)
        if line is not None:
            self._acks.append(line)
            self._wake.set()  # the daemon waits for it to relaunch the job

    def stats(self) -> Dict[str, int]:
        """Counters: sent, dropped, queued (in memory, unsent), spilled (in
        files, unsent), unconfirmed (sent, not yet confirmed stored)."""
        return {"sent": self._sent, "dropped": self._dropped_full + self._dropped_send,
                "queued": len(self._queue) + len(self._spool),
                "spilled": sum(n for _, n in self._spilled),
                "unconfirmed": len(self._unconfirmed) + self._left}

    def close(self, timeout: float = 1.0, exit_code: Optional[int] = None) -> None:
        """Flush what is queued, waiting at most timeout seconds; idempotent.

        The pre-emption signal gets its previous handler back: with no client
        to tell the daemon, the signal does what it did before. exit_code,
        given at the interpreter's exit, is the worker's end: left in the spool
        directory when no daemon is connected to take the last records.
        """
        if self._closed:
            return
        self._closed = True
        self._exit_code = exit_code
        if self._preempt_restore is not None:
            try:
                signal.signal(*self._preempt_restore)
            except ValueError:  # not the main thread: the handler stays, and does nothing
                pass
            self._preempt_restore = None
        self._close_wait = min(self.CONFIRM_WAIT, timeout / 2)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout * 3 / 4)
        if self._thread.is_alive():
            self._abort.set()
            self._wake.set()  # a sender between two flushes goes on to its end at once
            sock = self._sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # the write blocked on it fails at once
                except OSError:
                    pass
            self._thread.join(timeout / 4)

    def _run(self) -> None:
        """The sender thread: every interval, write what step() left and read
        the daemon's confirmations and requests; at close, flush once more."""
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._wlock:
                self._flush()
                self._poll()
        with self._wlock:
            if not self._abort.is_set():
                self._retry_at = 0.0
                self._flush()
                self._await_confirmations(self._close_wait)
            self._leave()
            self._leave_end()
            # A daemon that took the last records and has not confirmed them
            # yet (its store is full) holds them: sending them again later
            # would store them twice.
            self._disconnect(wait=0, resend=False)

    def _await_confirmations(self, wait: float) -> None:
        """Read the daemon's confirmations until every record sent is
        confirmed, the connection ends, or wait seconds pass."""
        if self._sock is not None and not self._read(wait, lambda: not self._unconfirmed):
            self._disconnect()

    def _leave(self) -> None:
        """At close: leave what no daemon took in the spool directory for the
        next daemon (a restart in progress), or count it dropped."""
        if not self._spill():
            self._dropped_send += len(self._spool)
            self._spool.clear()
        self.spooled = sum(n for _, n in self._spilled)

    def _encode_queue(self) -> None:
        """Move the queued steps, encoded, to the spool (oldest first)."""
        self._spool.extend(self._encode_lines())

    def _encode_lines(self) -> list:
        """The queued steps, taken off the queue and encoded (oldest first);
        one too long for the daemon is dropped and counted."""
        lines = []
        for _ in range(len(self._queue)):
            step, t, samples, loss, fields = self._queue.popleft()
            line = encode_step(self._prefix, step, t, samples, loss, {**self._defaults, **fields})
            if line is None:
                self._dropped_send += 1
            else:
                lines.append(line)
        return lines

    def _spill(self) -> bool:
        """Write the queued and spooled step records to a new file in the spool
        directory (atomically: a reader sees it whole or not at all)."""
        self._encode_queue()
        if not self._spool:
            return True
        lines = list(self._spool)
        path = self._write_spill(lines)
        if path is None:
            return False
        self._spool.clear()
        self._spilled.append((path, len(lines)))
        return True

    def _write_spill(self, lines: list) -> Optional[str]:
        """A new file in the spool directory holding lines, or None."""
        if not self._spill_dir:
            return None
        self._seq += 1
        path = self._spool_path(f"{self._seq:06d}")
        return path if self._write_spool_file(path, lines) else None

    def _spool_path(self, tail: str) -> str:
        """A file of this worker's in the spool directory."""
        return os.path.join(self._spill_dir, f"a{self._config.attempt}-r{self._config.rank}-{os.getpid()}-{tail}.jsonl")

    @staticmethod
    def _write_spool_file(path: str, lines: list) -> bool:
        """Write lines to path through a temporary file renamed into place;
        a failed write (a full disk) leaves no temporary file behind."""
        tmp = path + ".tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(b"".join(lines))
            os.replace(tmp, path)
            return True
        except OSError:
            try:
                os.remove(tmp)
            except OSError:
                pass
            return False

    def _leave_end(self) -> None:
        """At close with no daemon connected: leave the worker's end (the
        exit status close was given) in the spool directory, for the daemon
        that drains it to know that the worker finished (daemon/jobs/spool.go)."""
        if self._exit_code is None or self._sock is not None or not self._spill_dir:
            return
        line = encode(dict(self._header, kind="end", step=self._step, t=time.time(), code=self._exit_code))
        if line is not None:
            self._write_spool_file(self._spool_path("end"), [line])

    def _replay(self) -> bool:
        """Send the files this worker spilled, oldest first, each claimed by a
        rename (a file the daemon took meanwhile is skipped); False when the
        connection failed."""
        while self._spilled and self._sock is not None:
            path, n = self._spilled[0]
            claimed = path + ".sending"
            try:
                os.rename(path, claimed)
                with open(claimed, "rb") as f:
                    data = f.read()
            except OSError:  # the daemon has it (or it is gone): not ours to send
                self._spilled.popleft()
                continue
            try:
                self._sock.sendall(data)
            except OSError:
                os.rename(claimed, path)
                self._disconnect()
                return False
            os.remove(claimed)
            self._spilled.popleft()
            self._sent += n
            self._track(data.splitlines(keepends=True), 0)
        return self._sock is not None

    def _track(self, lines: list, first: int) -> None:
        """Count lines as written on the connection; the step records among
        them (from index first on) wait for the daemon's confirmation."""
        base = self._lines
        self._lines += len(lines)
        for i in range(first, len(lines)):
            self._unconfirmed.append((base + i + 1, lines[i]))

    def _forget_confirmed(self) -> None:
        """Forget the records the daemon confirmed stored."""
        stored = self.control.stored
        while self._unconfirmed and self._unconfirmed[0][0] <= stored:
            self._unconfirmed.popleft()

    def _flush(self) -> None:
        """Write every queued record; keep them queued while no daemon answers
        (or, connected, while as many as the queue holds wait for the
        daemon's confirmation), spilling them to the spool directory once
        SPILL_AFTER old or past half the queue's size."""
        if self._sock is None and not self._connect():
            self._hold_back()
            return
        if self._partial:  # the rest of a line step() began: before anything else
            try:
                self._sock.sendall(self._partial)
            except OSError:
                self._disconnect()
                return
            self._partial = b""
        room = len(self._unconfirmed) < self._capacity
        if room and not self._replay():
            return
        lines = []
        while self._acks:
            lines.append(self._acks.popleft())
        control = list(lines)  # acks and notices: never dropped while the worker lives
        if room:
            self._spill_at = None
            self._encode_queue()
            while self._spool:
                lines.append(self._spool.popleft())
        if lines:
            data = b"".join(lines)
            took = self._write(data)
            if took < len(data):
                # The lines the socket took whole are the daemon's (it reads
                # what a closed connection holds, and drops a cut line); the
                # rest are sent again on the next connection.
                whole = data.count(b"\n", 0, took)
                self._acks.extendleft(reversed(control[whole:]))
                self._track(lines[:whole], len(control))
                self._sent += whole
                self._keep(lines[max(whole, len(control)):])
                self._disconnect()
                return
            self._track(lines, len(control))
            self._sent += len(lines)
            self._last_write = time.monotonic()
        elif time.monotonic() - self._last_write >= self.KEEPALIVE:
            self._keepalive()
        if not room:
            self._hold_back()

    def _write(self, data: bytes) -> int:
        """Write data on the connection; the bytes it took: all of them,
        unless it broke, timed out or was ended under the write (close)."""
        view, took = memoryview(data), 0
        try:
            while took < len(data):
                took += self._sock.send(view[took:])
        except OSError:
            pass
        return took

    def _keepalive(self) -> None:
        """Write an empty line: the daemon ends connections silent for long."""
        try:
            self._sock.sendall(b"\n")
        except OSError:
            self._disconnect()
            return
        self._lines += 1
        self._last_write = time.monotonic()

    def _hold_back(self) -> None:
        """Keep the queued records while they cannot be sent, spilling them
        to the spool directory once SPILL_AFTER old or past half the
        queue's size."""
        pending, now = len(self._queue) + len(self._spool), time.monotonic()
        if not pending:
            self._spill_at = None
            return
        if self._spill_at is None:
            self._spill_at = now + self.SPILL_AFTER
        if (pending >= max(1, self._capacity // 2) or now >= self._spill_at) and self._spill():
            self._spill_at = None

    def _keep(self, lines: list) -> None:
        """Spool step records a failed write did not deliver, for the next
        connection: in memory, then in a file past the queue's size."""
        for line in lines:
            if len(self._spool) >= self._capacity and not self._spill():
                self._spool.popleft()
                self._dropped_send += 1
            self._spool.append(line)

    def _connect(self) -> bool:
        """Connect to the daemon unless backing off; report whether connected."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.WRITE_TIMEOUT)
        try:
            sock.connect(self._config.socket)
        except OSError:
            sock.close()
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, self.BACKOFF_MAX)
            return False
        try:  # announce this worker, so that requests reach it before its first step
            sock.sendall(self._hello())
        except OSError:
            sock.close()
            return False
        self._sock = sock
        self._lines = 1
        self._last_write = now
        self.control.new_connection()
        return True

    def _hello(self) -> bytes:
        """The line that introduces this worker on a new connection."""
        return encode(dict(self._header, kind="hello", step=self._step, t=time.time(), token=self._config.token,
                           confirm=True, session=self._session))

    def _poll(self) -> None:
        """Read whatever the daemon wrote, without waiting."""
        if self._sock is not None and not self._read(0):
            self._disconnect()

    def _read(self, wait: float, done: Any = lambda: False) -> bool:
        """Feed what the daemon writes (requests, confirmations) for wait
        seconds at most, or what is there already when wait is 0, or until
        done() holds; False when the connection ended. Readiness is asked
        first: the socket's timeout would make a plain recv wait."""
        deadline = time.monotonic() + wait
        while not done():
            left = deadline - time.monotonic()
            if wait > 0 and left <= 0:
                return True
            try:
                ready, _, _ = select.select([self._sock], [], [], max(left, 0))
                if not ready:
                    return True
                data = self._sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return True
            except (OSError, ValueError):
                return False
            if not data:  # the daemon closed the connection
                return False
            self.control.feed(data)
            if self.control.stored:  # the daemon takes this worker's records: connect at once next time
                self._backoff = self.BACKOFF_MIN
            self._forget_confirmed()
        return True

    def _disconnect(self, wait: Optional[float] = None, resend: bool = True) -> None:
        """Close the socket, if any, after reading (for wait seconds at most,
        EOF_WAIT by default) the daemon's last confirmations; with resend,
        the records it did not confirm go back to the front of the spool,
        for the next connection (not when close ended the connection under a
        write: the daemon read them, and holds them). The next flush
        reconnects."""
        if self._sock is None:
            return
        if wait != 0:
            self._read(self.EOF_WAIT if wait is None else wait)
        self._sock.close()
        self._sock = None
        self._partial = b""  # its lines are among the unconfirmed
        # The next connection waits: a daemon that ends connections at once
        # (one that does not know this attempt yet) is not asked in a loop.
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.BACKOFF_MAX)
        if resend and not self._abort.is_set():  # written again (and counted as sent again) next time
            lines = [line for _, line in self._unconfirmed]
            # They are older than any file still to send (those were made
            # while they waited, or come after them): they go first, so
            # that the daemon sees each rank's steps in order.
            path = self._write_spill(lines) if self._spilled and lines else None
            if path is not None:
                self._spilled.appendleft((path, len(lines)))
            else:
                self._spool.extendleft(reversed(lines))
            self._sent -= len(self._unconfirmed)
        else:
            self._left += len(self._unconfirmed)
        self._unconfirmed.clear()

