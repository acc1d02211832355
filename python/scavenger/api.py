"""Submit and follow jobs from python, as scavctl does: the node daemon's API.

Standard library only. The daemon (scavd) serves its API on a unix socket and
knows who calls from the kernel, so a job submitted here runs as you, and you
see and stop only your own jobs (root: everyone's). Unlike scavctl this module
never starts a daemon of its own: start one first (the service, or
`nohup scavd >scavd.log 2>&1 &`, see the README).

    import scavenger
    job = scavenger.run(["/usr/bin/python3", "train.py"], workers=(1, 4),
                        batch_size=(32, 256), policy="adaptive", target_steps=5000)
    print(job["id"], job["state"])
    done = scavenger.wait(job["id"])          # the final record
    print(done["state"], done["exit_code"])

Jobs are named by id, a unique id prefix, or name (the newest job of that
name), as on the command line. Records are the daemon's JSON (the same as
`scavctl status JOB -o json`).
"""

import http.client
import json
import os
import socket
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["Daemon", "DaemonError", "connect", "run", "jobs", "job", "stop", "wait"]

SYSTEM_STATE_DIR = "/var/lib/scavenger"
_DONE = ("succeeded", "failed", "stopped")

Range = Union[int, Tuple[int, int]]


class DaemonError(Exception):
    """No scavd answered, or it refused the request (the message says why)."""


def default_state_dir() -> str:
    """The state directory scavd and scavctl use unless told otherwise."""
    d = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if d:
        return d
    if os.geteuid() == 0:
        return SYSTEM_STATE_DIR
    if os.environ.get("XDG_STATE_HOME"):
        return os.path.join(os.environ["XDG_STATE_HOME"], "scavenger")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "scavenger")


def _sockets() -> List[str]:
    """Where to look for the API, in scavctl's order."""
    if os.environ.get("SCAV_API"):
        return [os.environ["SCAV_API"]]
    if os.environ.get("SCAV_STATE_DIR"):
        return [os.path.join(os.environ["SCAV_STATE_DIR"], "api.sock")]
    paths = [os.path.join(default_state_dir(), "api.sock"), os.path.join(SYSTEM_STATE_DIR, "api.sock")]
    return list(dict.fromkeys(paths))


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def _span(name: str, v: Optional[Range]) -> Tuple[int, int]:
    """(MIN, MAX) of a number or a range; (0, 0) for none."""
    if v is None:
        return 0, 0
    lo, hi = (v, v) if isinstance(v, int) else tuple(v)
    if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or lo > hi:
        raise ValueError(f"{name} {v!r}: give N or (MIN, MAX) with 1 <= MIN <= MAX")
    return lo, hi


class Daemon:
    """A connection to one scavd's API (a unix socket)."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 30.0):
        """Use the API at socket_path, or find it as scavctl does: $SCAV_API,
        $SCAV_STATE_DIR/api.sock, your state directory's, then the system's.
        Raises DaemonError naming every place tried when none answers."""
        self.timeout = timeout
        tried = []
        for path in [socket_path] if socket_path else _sockets():
            if path.startswith("https://"):
                raise DaemonError(f"{path}: this module speaks to a local scavd's unix socket; use scavctl --api for TCP")
            try:
                self.socket_path = path
                self.info = self._call("ping", {})
                return
            except OSError as e:
                tried.append(f"{path}: {e.strerror or e}")
        raise DaemonError("no scavd answered (" + "; ".join(tried) + "): start one "
                          "(systemctl start scavd, or nohup scavd >scavd.log 2>&1 &)")

    def _call(self, verb: str, body: Dict[str, Any]) -> Any:
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            conn.request("POST", "/v1/call/" + verb, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            rep = json.loads(raw or b"{}")
        except ValueError as e:
            raise DaemonError(f"scavd {verb}: HTTP {resp.status}, not a JSON reply: {e}") from None
        if rep.get("error"):
            raise DaemonError(f"scavd {verb}: {rep['error']}")
        if resp.status != 200:
            raise DaemonError(f"scavd {verb}: HTTP {resp.status}")
        return rep.get("data")

    def run(self, command: Sequence[str], *, workers: Range = 1, batch_size: Optional[Range] = None,
            name: str = "", policy: str = "", objective: str = "", target_steps: int = 0,
            target_samples: int = 0, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
            checkpoint_dir: str = "", grace: Optional[float] = None, price: float = 0.0,
            machine_type: str = "") -> Dict[str, Any]:
        """Submit a job and return its record at once (scavctl run -d).

        workers and batch_size (global) are a number or a (MIN, MAX) range;
        ranges need a moving policy (scavenger, adaptive, full). target_steps
        counts steps at the smallest batch. The workers get this process's
        environment with env on top, and start in cwd (default: here)."""
        if isinstance(command, str) or not command:
            raise ValueError("command: give the program and its arguments as a list, e.g. ['python3', 'train.py']")
        min_w, max_w = _span("workers", workers)
        min_b, max_b = _span("batch_size", batch_size)
        if target_steps and target_samples:
            raise ValueError("give one of target_steps, target_samples")
        optimize = {"policy": policy, "objective": objective, "min_workers": min_w, "max_workers": max_w,
                    "min_batch": min_b, "max_batch": max_b, "machine_type": machine_type,
                    "price_usd_per_hour": price,
                    "target_samples": target_samples or target_steps * max(min_b, 1)}
        full_env = dict(os.environ)
        full_env.update(env or {})
        req = {"name": name, "command": [str(a) for a in command], "dir": os.path.abspath(cwd or os.getcwd()),
               "env": [f"{k}={v}" for k, v in full_env.items()],
               "config": {"workers": min_w, "global_batch": min_b},
               "optimize": {k: v for k, v in optimize.items() if v},
               "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else ""}
        if grace is not None:
            req["grace"] = f"{grace}s"
        return self._call("run", req)

    def jobs(self, all: bool = False) -> List[Dict[str, Any]]:
        """Your jobs' records, oldest first (root with all=True: everyone's)."""
        return self._call("jobs", {"all": all}) or []

    def job(self, ref: str) -> Dict[str, Any]:
        """The record of the job named by id, name (the newest job of that
        name) or an id prefix no other job of yours shares."""
        try:
            return self._call("job", {"job": ref})
        except DaemonError as exact:
            js = self.jobs(all=os.geteuid() == 0)
            named = [j for j in js if j.get("name") == ref]
            if named:
                return named[-1]  # jobs() lists oldest first
            prefixed = [j for j in js if j["id"].startswith(ref)]
            if len(prefixed) == 1:
                return prefixed[0]
            if prefixed:
                raise DaemonError(f"job {ref}: {len(prefixed)} jobs' ids start with it ("
                                  + ", ".join(j["id"] for j in prefixed) + "): give more of the id") from None
            raise DaemonError(f"job {ref}: no job of yours has that id, id prefix or name ({exact})") from None

    def stop(self, ref: str, grace: Optional[float] = None) -> Dict[str, Any]:
        """Ask a job to checkpoint and stop (SIGKILL after grace seconds)."""
        req: Dict[str, Any] = {"job": self.job(ref)["id"]}
        if grace is not None:
            req["grace"] = f"{grace}s"
        return self._call("stop", req)

    def wait(self, ref: str, timeout: Optional[float] = None, poll: float = 1.0) -> Dict[str, Any]:
        """Wait until the job has ended and return its final record; raises
        TimeoutError after timeout seconds (None: no limit)."""
        jid = self.job(ref)["id"]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            j = self._call("job", {"job": jid})
            if j.get("state") in _DONE:
                return j
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {jid} is still {j.get('state')} after {timeout}s")
            time.sleep(poll)



def connect(socket_path: Optional[str] = None, timeout: float = 30.0) -> Daemon:
    """The daemon to use (see Daemon)."""
    return Daemon(socket_path, timeout)


def run(command: Sequence[str], **kwargs: Any) -> Dict[str, Any]:
    """Submit a job to the node's scavd (see Daemon.run)."""
    return connect().run(command, **kwargs)


def jobs(all: bool = False) -> List[Dict[str, Any]]:
    """Your jobs' records (see Daemon.jobs)."""
    return connect().jobs(all)


def job(ref: str) -> Dict[str, Any]:
    """One job's record (see Daemon.job)."""
    return connect().job(ref)


def stop(ref: str, grace: Optional[float] = None) -> Dict[str, Any]:
    """Stop a job (see Daemon.stop)."""
    return connect().stop(ref, grace)


def wait(ref: str, timeout: Optional[float] = None, poll: float = 1.0) -> Dict[str, Any]:
    """Wait for a job to end (see Daemon.wait)."""
    return connect().wait(ref, timeout, poll)
