"""Tests of the standard-library client: no-op mode, wire records, dropping."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import scavenger
from scavenger import _env
from scavenger._client import Client, MAX_RECORD_BYTES

from sink import Sink

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config(socket_path: str, start_step: int = 0) -> _env.Config:
    """A worker's configuration: rank 1 of 2, job j-1, attempt 2."""
    return _env.Config(socket=socket_path, job="j-1", attempt=2, rank=1, world=2,
                       start_step=start_step, local_batch=16, global_batch=32)


def daemon_and_client(test: unittest.TestCase, **sink: bool):
    """A checkpoint directory (the spool's), a Sink with the options sink
    on a socket in it, and a client of it; all removed at the test's end."""
    ckpt = tempfile.mkdtemp(prefix="scav-test-")
    test.addCleanup(shutil.rmtree, ckpt)
    path = os.path.join(ckpt, "d.sock")
    daemon = Sink(path=path, **sink)
    test.addCleanup(daemon.close)
    return ckpt, daemon, Client(dataclasses.replace(config(path), checkpoint_dir=ckpt))


def run_python(code: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with only env (plus PYTHONPATH) set;
    with check, a failed run raises."""
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PYTHON_DIR, **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=30, check=check)


class NoopTest(unittest.TestCase):
    """Outside Scavenger every call is a no-op: no thread, no socket, no record."""

    def test_no_thread_no_counters(self):
        out = run_python(
            "import threading, time, scavenger\n"
            "scavenger.init()\n"
            "t = time.perf_counter()\n"
            "for i in range(100000): scavenger.step(samples=8, loss=1.0)\n"
            "per_call = (time.perf_counter() - t) / 100000\n"
            "print(threading.active_count(), scavenger.enabled(), scavenger.stats(), per_call)\n",
            env={"WORLD_SIZE": "1"})
        threads, enabled, rest = out.stdout.split(" ", 2)
        self.assertEqual(threads, "1")
        self.assertEqual(enabled, "False")
        self.assertIn("'sent': 0, 'dropped': 0", rest)
        self.assertLess(float(rest.rsplit(" ", 1)[1]), 20e-6)

    def test_invalid_job_id_disables(self):
        out = run_python("import threading, scavenger\nscavenger.step()\n"
                         "print(threading.active_count())",
                         env={"SCAV_SOCKET": "/nonexistent", "SCAV_JOB_ID": "bad id!"})
        self.assertEqual(out.stdout.strip(), "1")
        self.assertIn("not a job id", out.stderr)


class EnvTest(unittest.TestCase):
    """The environment contract and its fallbacks."""

    def test_defaults_outside(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual((scavenger.world_size(), scavenger.rank(), scavenger.local_rank()),
                             (1, 0, 0))
            self.assertIsNone(scavenger.local_batch_size())
            self.assertEqual(scavenger.local_batch_size(default=7), 7)
            self.assertEqual(scavenger.global_batch_size(default=64), 64)
            self.assertEqual(scavenger.lr_scale(), 1.0)
            self.assertFalse(scavenger.enabled())
            self.assertIsNone(scavenger.checkpoint_dir())
            self.assertIsNone(scavenger.restore_path())

    def test_scavenger_values(self):
        env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "SCAV_GLOBAL_BATCH": "256",
               "SCAV_LOCAL_BATCH": "64", "SCAV_LR_SCALE": "2.5", "SCAV_SOCKET": "/x",
               "SCAV_CHECKPOINT_DIR": "/ck", "SCAV_RESTORE": "/ck/3"}
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual((scavenger.world_size(), scavenger.rank(), scavenger.local_rank()),
                             (4, 3, 1))
            self.assertEqual(scavenger.local_batch_size(default=1), 64)
            self.assertEqual(scavenger.global_batch_size(default=1), 256)
            self.assertEqual(scavenger.lr_scale(), 2.5)
            self.assertTrue(scavenger.enabled())
            self.assertEqual((scavenger.checkpoint_dir(), scavenger.restore_path()),
                             ("/ck", "/ck/3"))

    def test_batch_zero_refused(self):
        """A batch of 0 (or less) in the contract is an error naming the variable, never a batch."""
        for env in ({"SCAV_LOCAL_BATCH": "0"}, {"SCAV_GLOBAL_BATCH": "0", "WORLD_SIZE": "2"},
                    {"SCAV_GLOBAL_BATCH": "-4"}):
            name, value = next((k, v) for k, v in env.items() if k.startswith("SCAV_"))
            with self.subTest(env=env), mock.patch.dict(os.environ, env, clear=True):
                for read in (scavenger.local_batch_size, scavenger.global_batch_size,
                             _env.Config.from_env):
                    with self.assertRaises(_env.BatchError) as cm:
                        read()
                    self.assertIn(f"{name}={value}", str(cm.exception))
                    self.assertIn("--batch-size", str(cm.exception))
        self.assertTrue(issubclass(_env.BatchError, ValueError))

    def test_derived_batches(self):
        self.assertEqual(_env.local_batch(None, {"SCAV_GLOBAL_BATCH": "64", "WORLD_SIZE": "2"}), 32)
        self.assertEqual(_env.global_batch(None, {"SCAV_LOCAL_BATCH": "16", "WORLD_SIZE": "3"}), 48)

    def test_config(self):
        c = _env.Config.from_env({"SCAV_SOCKET": "/s", "SCAV_JOB_ID": "abc", "SCAV_ATTEMPT": "3",
                                  "RANK": "1", "WORLD_SIZE": "2", "SCAV_START_STEP": "40"})
        self.assertEqual((c.socket, c.job, c.attempt, c.rank, c.world, c.start_step),
                         ("/s", "abc", 3, 1, 2, 40))


    def test_resume_after_slurm_requeue(self):
        """A requeued batch script keeps its first environment: the newest checkpoint wins."""
        d = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, d)
        base = {"SCAV_CHECKPOINT_DIR": d, "SCAV_RESTORE": "", "SCAV_START_STEP": "0"}
        self.addCleanup(_env._requeue_points.clear)
        self.assertEqual(_env.resume_point({**base, "SLURM_RESTART_COUNT": "1"}), (None, 0))
        with open(os.path.join(d, "ckpt-0000000040.pt"), "wb") as f:
            f.write(b"x")
        with open(os.path.join(d, "latest.json"), "w", encoding="utf-8") as f:
            f.write('{"format": "scavenger.manifest/1", "checkpoint": "ckpt-0000000040.pt", "step": 40}')
        self.assertEqual(_env.resume_point(base), (None, 0))  # not requeued: the launcher's values
        requeued = {**base, "SLURM_RESTART_COUNT": "2"}
        self.assertEqual(_env.resume_point(requeued), (os.path.join(d, "ckpt-0000000040.pt"), 40))
        self.assertEqual(_env.Config.from_env(requeued).start_step, 40)
        with mock.patch.dict(os.environ, requeued, clear=True):
            self.assertEqual((scavenger.restore_path(), scavenger.start_step()),
                             (os.path.join(d, "ckpt-0000000040.pt"), 40))
        # Read once: a checkpoint written since does not change the answer...
        with open(os.path.join(d, "latest.json"), "w", encoding="utf-8") as f:
            f.write("{damaged")
        self.assertEqual(_env.resume_point(requeued)[1], 40)
        # ... and a damaged manifest on a fresh read means a fresh start.
        _env._requeue_points.clear()
        self.assertEqual(_env.resume_point(requeued), (None, 0))


class WireTest(unittest.TestCase):
    """Records reach a real unix-socket listener with every field right."""

    def setUp(self):
        self.sink = Sink()
        self.addCleanup(self.sink.close)

    def test_fields_and_contiguous_steps(self):
        client = Client(config(self.sink.path, start_step=7))
        before = time.time()
        for i in range(5):
            client.step(samples=16, loss=0.5 + i, micro=2, compute_s=0.01, sync_s=0.002,
                        local_sqr=3.0, avg_sqr=1.5, epoch=1, note="x")
        client.close()
        recs = self.sink.wait_for(5)
        self.assertEqual([r["step"] for r in recs], [8, 9, 10, 11, 12])
        r = recs[-1]
        expected = {"v": 1, "job": "j-1", "attempt": 2, "rank": 1, "world": 2, "samples": 16,
                    "local_batch": 16, "global_batch": 32, "micro": 2, "compute_s": 0.01,
                    "sync_s": 0.002, "loss": 4.5, "local_sqr": 3.0, "avg_sqr": 1.5, "epoch": 1,
                    "note": "x"}
        self.assertEqual({k: r[k] for k in expected}, expected)
        self.assertTrue(before <= r["t"] <= time.time())
        self.assertTrue(all(0 <= rec["dt"] < 5 for rec in recs))
        self.assertEqual(client.stats(), {"sent": 5, "dropped": 0, "queued": 0, "spilled": 0, "unconfirmed": 0})

    def test_invalid_values_left_out(self):
        client = Client(config(self.sink.path))
        client.step(samples=True, loss=float("nan"), dt=float("inf"), local_sqr=-1.0,
                    avg_sqr=float("nan"), micro=0, compute_s="fast", epoch=None, extra=float("inf"),
                    step=99, job="other")
        client.step(loss=float("-inf"), samples=-3)
        client.close()
        recs = self.sink.wait_for(2)
        self.assertEqual(len(recs), 2)
        # A non-finite loss is recorded, as the wire spells it (issue 21);
        # every other non-finite number is left out.
        self.assertEqual(set(recs[0]), {"v", "job", "attempt", "rank", "world", "step", "t",
                                        "local_batch", "global_batch", "loss"})
        self.assertEqual((recs[0]["step"], recs[0]["job"], recs[0]["loss"]), (1, "j-1", "NaN"))
        self.assertEqual(recs[1]["loss"], "-Infinity")
        self.assertNotIn("samples", recs[1])

    def test_nonfinite_loss_recorded(self):
        # A run that diverges says so: the loss is NaN from step 2 on (issue
        # 21: the client dropped it, and the summary read "1.0 -> 0.02").
        client = Client(config(self.sink.path))
        for loss in (1.0, float("nan"), float("inf"), 0.5):
            client.step(samples=1, loss=loss)
        client.close()
        recs = self.sink.wait_for(4)
        self.assertEqual([r["loss"] for r in recs], [1.0, "NaN", "Infinity", 0.5])
        for line in self.sink.lines():
            json.loads(line)  # standard JSON: no bare NaN

    def test_hello_names_a_session_kept_across_connections(self):
        path, first, client = self._five_delivered(confirm=False)
        first.close()
        client.step(samples=5)
        second = Sink(path=path)
        self.addCleanup(second.close)
        second.wait_for(6, timeout=5)
        sessions = {h.get("session") for h in first.of_kind("hello") + second.of_kind("hello")}
        self.assertEqual(len(sessions), 1, "one client, one session on every connection")
        self.assertRegex(sessions.pop() or "", r"^[0-9a-f]{16}$")

    def test_keepalive_on_a_silent_connection(self):
        client = Client(config(self.sink.path))
        client.KEEPALIVE = 0.1
        self.addCleanup(client.close)
        client.step(samples=1)
        self.sink.wait_for(1)
        deadline = time.monotonic() + 5
        while self.sink.blank() < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertGreaterEqual(self.sink.blank(), 2, "empty lines while the worker has nothing to say")
        client.step(samples=2)
        self.sink.wait_for(2)
        deadline = time.monotonic() + 5
        while client.stats()["unconfirmed"] and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(client.stats()["unconfirmed"], 0, "empty lines counted as the daemon counts them")

    def test_a_refused_hello_backs_off(self):
        # A daemon that does not know the attempt yet (it is restarting)
        # ends the connection after the hello: the client asks again, less
        # and less often, not every flush.
        refusing = Sink(confirm=False, hang_up=True)
        self.addCleanup(refusing.close)
        client = Client(config(refusing.path))
        self.addCleanup(client.close)
        client.step(samples=1)
        time.sleep(1.0)
        hellos = len(refusing.of_kind("hello"))
        self.assertGreaterEqual(hellos, 2)
        self.assertLessEqual(hellos, 7, "a connection at most every flush would make 20")

    def test_oversized_record_dropped(self):
        client = Client(config(self.sink.path))
        client.step(blob="x" * MAX_RECORD_BYTES)
        client.step(samples=1)
        client.close()
        recs = self.sink.wait_for(1)
        self.assertEqual([r["step"] for r in recs], [2])
        self.assertEqual(client.stats()["dropped"], 1)

    def test_daemon_appears_later(self):
        path = os.path.join(tempfile.mkdtemp(prefix="scav-test-"), "late.sock")
        self.addCleanup(os.rmdir, os.path.dirname(path))
        client = Client(config(path))  # no daemon yet: records wait in the queue
        self.addCleanup(client.close)
        client.step(samples=1)
        client.step(samples=2)
        time.sleep(0.3)
        late = Sink(path=path)
        self.addCleanup(late.close)
        recs = late.wait_for(2, timeout=5)
        self.assertEqual([(r["step"], r["samples"]) for r in recs], [(1, 1), (2, 2)])

    def _five_delivered(self, confirm: bool = True):
        """A client that has delivered 5 steps to a daemon (a Sink that
        confirms them or not) on a socket of a fresh directory: (path, daemon, client)."""
        path = os.path.join(tempfile.mkdtemp(prefix="scav-test-"), "d.sock")
        self.addCleanup(os.rmdir, os.path.dirname(path))
        first = Sink(path=path, confirm=confirm)
        client = Client(config(path))
        self.addCleanup(client.close)
        for i in range(5):
            client.step(samples=i)
        self.assertEqual(len(first.wait_for(5, timeout=5)), 5)
        return path, first, client

    def _await_confirmed(self, client: Client) -> None:
        """Wait (5 s at most) until the daemon confirmed every record sent."""
        deadline = time.monotonic() + 5
        while client.stats()["unconfirmed"] and time.monotonic() < deadline:
            time.sleep(0.02)

    def test_daemon_restart_loses_nothing(self):
        path, first, client = self._five_delivered()
        first.close()  # the daemon goes away: writes fail, records are spooled
        for i in range(5, 10):
            client.step(samples=i)
            time.sleep(0.06)
        second = Sink(path=path)  # a new daemon on the same socket
        self.addCleanup(second.close)
        recs = second.wait_for(5, timeout=5)
        self.assertEqual([r["step"] for r in recs], [6, 7, 8, 9, 10])
        self.assertEqual(len(second.of_kind("hello")), 1, "the new connection starts with a hello")
        self.assertEqual(client.stats()["dropped"], 0)

    def test_records_a_dying_daemon_did_not_confirm_are_sent_again(self):
        # The daemon reads the records but dies before it stores them (it
        # never confirms): the client sends them again to the next one.
        path, first, client = self._five_delivered(confirm=False)
        self.assertEqual(client.stats()["unconfirmed"], 5)
        first.close()
        client.step(samples=5)
        second = Sink(path=path)
        self.addCleanup(second.close)
        recs = second.wait_for(6, timeout=5)
        self.assertEqual([r["step"] for r in recs], [1, 2, 3, 4, 5, 6])
        self._await_confirmed(client)
        self.assertEqual((client.stats()["unconfirmed"], client.stats()["dropped"]), (0, 0))
        self.assertEqual(client.stats()["sent"], 6, "a record sent again is counted once")

    def test_confirmed_records_are_not_sent_again(self):
        path, first, client = self._five_delivered()
        self._await_confirmed(client)
        self.assertEqual(client.stats()["unconfirmed"], 0)
        first.close()
        client.step(samples=5)
        second = Sink(path=path)
        self.addCleanup(second.close)
        self.assertEqual([r["step"] for r in second.wait_for(1, timeout=5)], [6])
        time.sleep(0.2)
        self.assertEqual([r["step"] for r in second.records()], [6], "only the unconfirmed record is sent again")

    def test_a_live_daemon_keeps_what_it_did_not_confirm_at_close(self):
        # A daemon whose store is full holds the records it read: at close
        # they are not left in the spool as well (they would be stored twice).
        ckpt, sink, client = daemon_and_client(self, confirm=False)
        for i in range(3):
            client.step(samples=i)
        sink.wait_for(3, timeout=5)
        client.close()
        self.assertEqual((client.spooled, client.stats()["unconfirmed"]), (0, 3))
        self.assertFalse(os.path.exists(os.path.join(ckpt, ".scavenger-spool")))

    def test_records_no_daemon_took_are_left_for_the_next(self):
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        cfg = dataclasses.replace(config(os.path.join(ckpt, "absent.sock")), checkpoint_dir=ckpt)
        client = Client(cfg)
        for i in range(3):
            client.step(samples=i)
        client.close()
        spool = os.path.join(ckpt, ".scavenger-spool")
        files = os.listdir(spool)
        self.assertEqual(len(files), 1, files)
        with open(os.path.join(spool, files[0])) as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual([(r["job"], r["attempt"], r["rank"], r["step"]) for r in recs],
                         [("j-1", 2, 1, 1), ("j-1", 2, 1, 2), ("j-1", 2, 1, 3)])
        self.assertEqual((client.spooled, client.stats()["dropped"]), (3, 0))

    def test_overflow_while_no_daemon_spills_and_replays(self):
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        path = os.path.join(ckpt, "d.sock")
        cfg = dataclasses.replace(config(path), checkpoint_dir=ckpt)
        client = Client(cfg, queue_size=100)
        self.addCleanup(client.close)
        for burst in range(25):  # 1000 records, ten times the queue, no daemon
            for i in range(40):
                client.step(samples=burst * 40 + i)
            time.sleep(0.06)
        s = client.stats()
        self.assertEqual(s["dropped"], 0)
        self.assertLessEqual(s["queued"], 100)
        self.assertGreater(s["spilled"], 800)
        spool = os.path.join(ckpt, ".scavenger-spool")
        self.assertTrue(os.listdir(spool))
        sink = Sink(path=path)  # a daemon comes: the spilled records go first, in order
        self.addCleanup(sink.close)
        recs = sink.wait_for(1000, timeout=10)
        self.assertEqual([r["step"] for r in recs], list(range(1, 1001)))
        self.assertEqual((client.stats()["spilled"], client.stats()["dropped"]), (0, 0))
        self.assertEqual(os.listdir(spool), [])

    def test_records_waiting_for_a_daemon_go_to_a_file(self):
        # A few records, far below half the queue: while no daemon answers they
        # still reach the spool directory, so that a worker killed meanwhile
        # (a restarted daemon stops the workers it cannot reattach to) keeps them.
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        client = Client(dataclasses.replace(config(os.path.join(ckpt, "d.sock")), checkpoint_dir=ckpt))
        self.addCleanup(client.close)
        for i in range(3):
            client.step(samples=i)
        spool = os.path.join(ckpt, ".scavenger-spool")
        deadline = time.monotonic() + 30
        while client.stats()["spilled"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(client.stats()["spilled"], 3)
        recs = []
        for name in os.listdir(spool):
            with open(os.path.join(spool, name)) as f:
                recs += [json.loads(line) for line in f]
        self.assertEqual(sorted(r["step"] for r in recs), [1, 2, 3])

    def test_a_spilled_file_the_daemon_took_is_not_sent(self):
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        path = os.path.join(ckpt, "d.sock")
        client = Client(dataclasses.replace(config(path), checkpoint_dir=ckpt), queue_size=10)
        self.addCleanup(client.close)
        for i in range(8):
            client.step(samples=i)
        time.sleep(0.2)
        spool = os.path.join(ckpt, ".scavenger-spool")
        files = sorted(os.listdir(spool))
        self.assertEqual(len(files), 1, files)
        os.rename(os.path.join(spool, files[0]), os.path.join(spool, files[0] + ".draining"))  # the daemon claims it
        client.step(samples=9)
        sink = Sink(path=path)
        self.addCleanup(sink.close)
        recs = sink.wait_for(1, timeout=5)
        time.sleep(0.2)
        self.assertEqual([r["step"] for r in sink.records()], [9])

    def test_module_api_in_a_worker(self):
        code = ("import scavenger\n"
                "for i in range(10): scavenger.step(samples=32, loss=1.25)\n")
        env = {"SCAV_SOCKET": self.sink.path, "SCAV_JOB_ID": "job_7", "SCAV_ATTEMPT": "1",
               "RANK": "0", "WORLD_SIZE": "2", "SCAV_GLOBAL_BATCH": "64", "SCAV_LOCAL_BATCH": "32",
               "SCAV_START_STEP": "100"}
        run_python(code, env)  # the atexit flush delivers everything
        recs = self.sink.wait_for(10)
        self.assertEqual([r["step"] for r in recs], list(range(101, 111)))
        self.assertNotIn("dt", recs[0])  # implicit init: the first step has no start
        self.assertIn("dt", recs[1])
        self.assertEqual({(r["job"], r["world"], r["local_batch"], r["global_batch"], r["loss"])
                          for r in recs}, {("job_7", 2, 32, 64, 1.25)})


    def test_a_killed_worker_loses_no_step_that_returned(self):
        """SIGKILL right after step() returns: the record is in the socket
        already (steps of Client.DIRECT_MOST or longer), so the daemon has it."""
        code = ("import os, signal, time, scavenger\n"
                "scavenger.init()\n"
                "for i in range(30):\n"
                "    scavenger.step(samples=1)\n"
                "    time.sleep(%r)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n") % Client.DIRECT_MOST
        done = run_python(code, {"SCAV_SOCKET": self.sink.path, "SCAV_JOB_ID": "job_7", "SCAV_ATTEMPT": "1",
                                 "RANK": "0", "WORLD_SIZE": "1"}, check=False)
        self.assertEqual(done.returncode, -signal.SIGKILL, done.stderr)
        recs = self.sink.wait_for(30)
        self.assertEqual([r["step"] for r in recs], list(range(1, 31)))

    def test_preempt_signal_becomes_a_notice(self):
        """SCAV_PREEMPT_SIGNAL=USR1: the signal no longer kills the worker; a preempt line goes out."""
        code = ("import os, signal, time, scavenger\n"
                "for i in range(3): scavenger.step(samples=1)\n"
                "os.kill(os.getpid(), signal.SIGUSR1)\n"
                "time.sleep(0.2)\n"
                "scavenger.step(samples=1)\n"
                "print('alive')\n")
        env = {"SCAV_SOCKET": self.sink.path, "SCAV_JOB_ID": "job_8", "SCAV_ATTEMPT": "1",
               "RANK": "0", "WORLD_SIZE": "1", "SCAV_PREEMPT_SIGNAL": "USR1"}
        out = run_python(code, env)
        self.assertEqual(out.stdout.strip(), "alive")
        msgs = self.sink.wait_for(4)
        notices = self.sink.wait_for(1, kind="preempt")
        self.assertEqual(len(notices), 1, self.sink.messages())
        self.assertEqual((notices[0]["job"], notices[0]["step"], notices[0]["id"]), ("job_8", 3, "SIGUSR1"))
        self.assertEqual([m["step"] for m in msgs], [1, 2, 3, 4])

    def test_preempt_handler_gone_after_close(self):
        """Closed, the client hands the signal back: USR1 ends the worker as it did before."""
        code = ("import os, signal, scavenger\n"
                "scavenger.step(samples=1)\n"
                "scavenger.close()\n"
                "os.kill(os.getpid(), signal.SIGUSR1)\n"
                "print('survived')\n")
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PYTHON_DIR, "SCAV_SOCKET": self.sink.path,
               "SCAV_JOB_ID": "job_10", "SCAV_ATTEMPT": "1", "RANK": "0", "WORLD_SIZE": "1",
               "SCAV_PREEMPT_SIGNAL": "USR1"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, -signal.SIGUSR1, out)
        self.assertNotIn("survived", out.stdout)

    def test_preempt_signal_left_to_the_script(self):
        """A script that handles the signal itself keeps its handler."""
        code = ("import os, signal, scavenger\n"
                "signal.signal(signal.SIGUSR1, lambda *a: print('mine'))\n"
                "scavenger.step(samples=1)\n"
                "os.kill(os.getpid(), signal.SIGUSR1)\n")
        env = {"SCAV_SOCKET": self.sink.path, "SCAV_JOB_ID": "job_9", "SCAV_ATTEMPT": "1",
               "RANK": "0", "WORLD_SIZE": "1", "SCAV_PREEMPT_SIGNAL": "SIGUSR1"}
        self.assertEqual(run_python(code, env).stdout.strip(), "mine")
        self.sink.wait_for(1)
        self.assertEqual(self.sink.wait_for(1, timeout=0.3, kind="preempt"), [])


class NeverBlocksTest(unittest.TestCase):
    """An absent or stalled daemon costs records, never training time."""

    def burst(self, client: Client, n: int) -> float:
        """The slowest of n step() calls, in seconds."""
        worst = 0.0
        for _ in range(n):
            t = time.perf_counter()
            client.step(samples=32, loss=1.0, local_sqr=1.0, avg_sqr=0.5, note="y" * 100)
            worst = max(worst, time.perf_counter() - t)
        return worst

    def test_absent_daemon(self):
        client = Client(config("/nonexistent/scav.sock"), queue_size=100)
        start = time.perf_counter()
        worst = self.burst(client, 50000)
        self.assertLess(time.perf_counter() - start, 2.0)
        self.assertLess(worst, 0.5)  # a scheduler hiccup at most; blocking would take seconds
        t = time.perf_counter()
        client.close(timeout=1.0)
        self.assertLess(time.perf_counter() - t, 1.5)
        s = client.stats()
        self.assertEqual(s["sent"], 0)
        self.assertGreaterEqual(s["dropped"], 50000 - 100)

    def test_stalled_daemon(self):
        sink = Sink(read=False)
        self.addCleanup(sink.close)
        client = Client(config(sink.path), queue_size=500)
        worst = 0.0
        for _ in range(30):  # ~30 flushes of up to 500 records: far past the socket buffer
            worst = max(worst, self.burst(client, 1000))
            time.sleep(0.06)
        self.assertLess(worst, 0.5)
        t = time.perf_counter()
        client.close(timeout=0.3)
        self.assertLess(time.perf_counter() - t, 1.0)
        self.assertGreater(client.stats()["dropped"], 0)
        self.assertGreater(client.stats()["sent"], 0)


    def test_close_under_a_stalled_daemon_loses_nothing(self):
        # A daemon that stops reading as the worker ends (its store is full:
        # it holds what it read) leaves the sender blocked in a write. close
        # ends the connection under it within its time: each record is then
        # in the daemon's socket or in the spool directory, once (a scavd
        # test lost the 148 records of such a write with the interpreter).
        ckpt, sink, client = daemon_and_client(self, read=False)
        n = 3000  # about 1 MB: far past the socket's buffers, within the queue
        for i in range(n):
            client.step(samples=32, note="y" * 200)
            if i % 100 == 0:
                time.sleep(0.01)
        t = time.perf_counter()
        client.close(timeout=1.0)
        self.assertLess(time.perf_counter() - t, 1.5)
        spool = os.path.join(ckpt, ".scavenger-spool")
        spooled = []
        for name in os.listdir(spool) if os.path.isdir(spool) else []:
            with open(os.path.join(spool, name)) as f:
                spooled += [json.loads(line)["step"] for line in f]
        read = [r["step"] for r in sink.unread()]
        self.assertGreater(len(read), 0)
        self.assertGreater(len(spooled), 0)
        self.assertEqual(sorted(read + spooled), list(range(1, n + 1)),
                         f"{len(read)} in the socket, {len(spooled)} spooled, stats {client.stats()}")
        self.assertEqual(client.stats()["dropped"], 0)


class EndRecordTest(unittest.TestCase):
    """A worker that ends while no daemon answers leaves its end in the spool
    directory (for the daemon that drains it: daemon/jobs/spool.go), and a
    failed spool write leaves no temporary file."""

    def spool_of(self, code: str) -> list:
        """Run code as a worker with no daemon; return the spool's records."""
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        env = {"SCAV_SOCKET": os.path.join(ckpt, "none.sock"), "SCAV_JOB_ID": "job_end", "SCAV_ATTEMPT": "2",
               "RANK": "1", "WORLD_SIZE": "2", "SCAV_CHECKPOINT_DIR": ckpt}
        full = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PYTHON_DIR, **env}
        subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, timeout=30)
        spool = os.path.join(ckpt, ".scavenger-spool")
        recs = []
        for name in sorted(os.listdir(spool)):
            self.assertFalse(name.endswith(".tmp"), name)
            with open(os.path.join(spool, name)) as f:
                recs += [json.loads(line) for line in f]
        return recs

    def test_end_records_the_exit(self):
        steps = "import scavenger, sys\nfor i in range(3): scavenger.step(samples=1)\n"
        for tail, want in (("", 0), ("sys.exit(3)\n", 3), ("raise ValueError('x')\n", 1), ("sys.exit('bye')\n", 1)):
            recs = self.spool_of(steps + tail)
            ends = [r for r in recs if r.get("kind") == "end"]
            self.assertEqual([r["step"] for r in recs if "kind" not in r], [1, 2, 3], tail)
            self.assertEqual([(r["job"], r["attempt"], r["rank"], r["world"], r["step"], r["code"]) for r in ends],
                             [("job_end", 2, 1, 2, 3, want)], tail)

    def test_a_failed_spool_write_leaves_no_temporary(self):
        ckpt = tempfile.mkdtemp(prefix="scav-test-")
        self.addCleanup(shutil.rmtree, ckpt)
        client = Client(dataclasses.replace(config(os.path.join(ckpt, "d.sock")), checkpoint_dir=ckpt))
        self.addCleanup(client.close)
        real_open = open

        class Full:
            """A file on a full disk: made, but nothing can be written to it."""
            def __init__(self, path, mode):
                self.f = real_open(path, mode)
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                self.f.close()
            def write(self, b):
                raise OSError(28, "No space left on device")

        with mock.patch("scavenger._client.open", Full, create=True):
            for i in range(3):
                client.step(samples=i)
            time.sleep(0.6)  # past SPILL_AFTER: the client tries to spill
        spool = os.path.join(ckpt, ".scavenger-spool")
        self.assertEqual([n for n in os.listdir(spool) if n.endswith(".tmp")], [])
        self.assertEqual(client.stats()["spilled"], 0)


if __name__ == "__main__":
    unittest.main()
