"""Measure what scavenger.step() costs the training thread, in microseconds per call.

    /usr/bin/python3 python/bench/step_cost.py [--socket PATH] [--rounds 20] [--calls 1000]

Without --socket a local listener that reads, discards and confirms (as
the daemon does) is started. Cases:
  noop      outside Scavenger (no SCAV_SOCKET): the module-level no-op
  minimal   step() with nothing but the automatic fields
  tracker   step() with the fields scavenger.torch sends
  spaced    tracker, with the calls DIRECT_MOST apart (a step that long or
            longer): each call writes its record to the socket itself
  absent    the daemon's socket does not exist: records are dropped
Each round makes --calls calls back to back (spaced: a tenth as many, each
timed alone), then sleeps a flush interval so the queue drains; the table
gives the median and the worst round.
"""

import argparse
import contextlib
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import scavenger  # noqa: E402
from scavenger import _env  # noqa: E402
from scavenger._client import Client  # noqa: E402

TRACKER_FIELDS = {"samples": 32, "loss": 2.3, "dt": 0.02, "micro": 1, "compute_s": 0.018,
                  "sync_s": 0.002, "local_sqr": 1.7, "avg_sqr": 0.9}


def discard_server(path: str) -> socket.socket:
    """Listen on path and read every connection to the end, discarding what it
    reads and confirming it, as the daemon does (a "stored" line for each read,
    counting the lines so far); return the listener."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)

    def serve(conn: socket.socket) -> None:
        lines = 0
        with conn:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                lines += data.count(b"\n")
                conn.sendall(b'{"v":1,"kind":"stored","id":"","job":"","attempt":0,"lines":%d}\n' % lines)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


@contextlib.contextmanager
def discard_socket():
    """A discard_server on a socket in a new temporary directory: its path,
    closed and removed at the end of the with block."""
    tmp = tempfile.mkdtemp(prefix="scav-bench-")
    path = os.path.join(tmp, "sink.sock")
    listener = discard_server(path)
    try:
        yield path
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(tmp)


def rounds(call, n_rounds: int, n_calls: int, pause: float) -> list:
    """Microseconds per call of each round."""
    out = []
    for _ in range(n_rounds):
        start = time.perf_counter()
        for _ in range(n_calls):
            call()
        out.append((time.perf_counter() - start) / n_calls * 1e6)
        time.sleep(pause)
    return out


def spaced_rounds(call, n_rounds: int, n_calls: int, gap: float) -> list:
    """Microseconds per call of each round, the calls gap seconds of busy
    work apart, as a step's compute (a sleep would time the wake-up after
    it too); only the calls are timed."""
    out = []
    for _ in range(n_rounds):
        spent = 0.0
        for _ in range(n_calls):
            until = time.perf_counter() + gap
            while time.perf_counter() < until:
                pass
            start = time.perf_counter()
            call()
            spent += time.perf_counter() - start
        out.append(spent / n_calls * 1e6)
    return out


def client_for(path: str) -> Client:
    """A client as rank 0 of 1 in job bench, writing to path."""
    return Client(_env.Config(socket=path, job="bench", attempt=1, rank=0, world=1, start_step=0,
                              local_batch=32, global_batch=32))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", default="", help="a listening daemon socket (default: start one)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--calls", type=int, default=1000)
    args = p.parse_args()
    with contextlib.ExitStack() as stack:
        path = args.socket or stack.enter_context(discard_socket())
        absent = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="scav-bench-")),
                              "absent.sock")
        measure(args, path, absent)


def measure(args: argparse.Namespace, path: str, absent: str) -> None:
    """Each case's rounds and the table, with steps sent to path (absent: a socket nobody serves)."""
    os.environ.pop("SCAV_SOCKET", None)
    pause = 1.2 * Client.FLUSH_INTERVAL  # a flush interval: the queue drains
    rows = [("noop", rounds(lambda: scavenger.step(samples=32, loss=2.3), args.rounds,
                            args.calls, 0), None, args.calls)]
    for name, target, fields in (("minimal", path, {}), ("tracker", path, TRACKER_FIELDS),
                                 ("absent", absent, TRACKER_FIELDS)):
        client = client_for(target)
        per_call = rounds(lambda: client.step(**fields), args.rounds, args.calls, pause)
        client.close(timeout=2.0)
        rows.append((name, per_call, client.stats(), args.calls))
    client = client_for(path)
    n_spaced = max(1, args.calls // 10)
    per_call = spaced_rounds(lambda: client.step(**TRACKER_FIELDS), args.rounds, n_spaced, Client.DIRECT_MOST)
    client.close(timeout=2.0)
    rows.append(("spaced", per_call, client.stats(), n_spaced))
    print(f"{'case':<9} {'calls':>7} {'median us':>10} {'worst us':>9} {'sent':>7} {'dropped':>8}")
    for name, per_call, stats, calls in rows:
        sent, dropped = (stats["sent"], stats["dropped"]) if stats else ("-", "-")
        print(f"{name:<9} {len(per_call) * calls:>7} {statistics.median(per_call):>10.2f} "
              f"{max(per_call):>9.2f} {sent:>7} {dropped:>8}")


if __name__ == "__main__":
    main()
