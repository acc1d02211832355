"""A stand-in for the node daemon's socket: a unix listener that collects lines."""

import json
import os
import socket
import tempfile
import threading
import time


class Sink:
    """Accepts connections on a fresh unix socket and keeps every line received.

    With read=False it accepts but never reads, like a stalled daemon. Like
    the daemon, it confirms each line it read to a client whose hello asked
    (a "stored" line), unless confirm is False (a daemon whose store does
    not take them); with hang_up it ends each connection after its hello
    (a daemon that refuses it). path defaults to a socket in a fresh
    temporary directory, removed at close().
    """

    def __init__(self, read: bool = True, path: str = "", confirm: bool = True, hang_up: bool = False):
        self._own_dir = "" if path else tempfile.mkdtemp(prefix="scav-test-")
        self.path = path or os.path.join(self._own_dir, "d.sock")
        self._read = read
        self._confirm = confirm
        self._hang_up = hang_up  # end each connection after its hello, as a daemon that refuses it
        self._write_lock = threading.Lock()  # one writer at a time on a connection
        self._lines = []
        self._conns = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            if self._read:
                t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                self._threads.append(t)
                t.start()

    def _serve(self, conn: socket.socket) -> None:
        n, confirm = 0, False
        with conn.makefile("rb") as f:
            try:
                for line in f:
                    n += 1
                    with self._lock:
                        self._lines.append(line)
                    if n == 1:
                        confirm = self._confirm and json.loads(line).get("confirm") is True
                        if self._hang_up:
                            conn.shutdown(socket.SHUT_WR)
                            return
                    if confirm:
                        self._write(conn, (json.dumps({"v": 1, "kind": "stored", "lines": n}) + "\n").encode())
            except (OSError, ValueError):
                return

    def _write(self, conn: socket.socket, line: bytes) -> bool:
        with self._write_lock:
            try:
                conn.sendall(line)
                return True
            except OSError:
                return False

    def lines(self) -> list:
        """The raw lines received so far."""
        with self._lock:
            return list(self._lines)

    def messages(self) -> list:
        """Every line received so far, decoded: steps, hellos and acks (the
        empty lines of a silent client left out)."""
        return [json.loads(line) for line in self.lines() if line.strip()]

    def blank(self) -> int:
        """The empty lines received so far (a silent client's keepalives)."""
        return sum(1 for line in self.lines() if not line.strip())

    def records(self) -> list:
        """The step records received so far (hello and ack lines left out)."""
        return [m for m in self.messages() if m.get("kind", "step") == "step"]

    def of_kind(self, kind: str) -> list:
        """The control messages of one kind (hello, ack) received so far."""
        return [m for m in self.messages() if m.get("kind") == kind]

    def wait_for(self, n: int, timeout: float = 10.0, kind: str = "step") -> list:
        """Poll until at least n messages of kind arrived or timeout passed; return them."""
        deadline = time.monotonic() + timeout
        get = self.records if kind == "step" else (lambda: self.of_kind(kind))
        while len(get()) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return get()

    def unread(self) -> list:
        """For a sink that does not read: the step records its connections
        hold, read to their end (their clients closed them), a last line cut
        short left out as the daemon leaves it."""
        with self._lock:
            conns = list(self._conns)
        msgs = []
        for c in conns:
            c.settimeout(5)
            data = b""
            while True:
                chunk = c.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            msgs += [json.loads(line) for line in data.split(b"\n")[:-1] if line.strip()]
        return [m for m in msgs if m.get("kind", "step") == "step"]

    def send(self, obj: dict) -> int:
        """Write obj as one JSON line to every open connection, as the daemon writes requests."""
        line = (json.dumps(obj) + "\n").encode()
        with self._lock:
            conns = list(self._conns)
        return sum(self._write(c, line) for c in conns)

    def close(self) -> None:
        """Stop listening, close every connection and remove the socket file."""
        with self._lock:
            socks = [self._listener] + self._conns
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the threads blocked on it
            except OSError:
                pass
            sock.close()
        for t in list(self._threads):
            t.join(2)
        os.unlink(self.path)
        if self._own_dir:
            os.rmdir(self._own_dir)
