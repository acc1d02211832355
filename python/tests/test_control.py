"""Tests of the control path: the daemon's checkpoint requests and the workers' acks."""

import time
import unittest

from scavenger import _env
from scavenger._client import Client, NoopClient
from scavenger._control import ControlState

from sink import Sink


def config(socket_path: str, start_step: int = 0) -> _env.Config:
    """Rank 0 of 2 of job j-1, attempt 2."""
    return _env.Config(socket=socket_path, job="j-1", attempt=2, rank=0, world=2,
                       start_step=start_step, local_batch=16, global_batch=32)


def request(after_step: int, attempt: int = 2, rid: str = "j-1-2-5") -> dict:
    """A checkpoint request as the daemon writes it."""
    return {"v": 1, "kind": "checkpoint", "id": rid, "job": "j-1", "attempt": attempt,
            "after_step": after_step, "dir": "/ckpt"}


class ControlStateTest(unittest.TestCase):
    """Parsing the daemon's lines."""

    def test_lines_split_across_reads(self):
        c = ControlState(attempt=2)
        c.feed(b'{"v":1,"kind":"checkpoint","id":"a","job":"j","attempt":2,')
        self.assertIsNone(c.request())
        c.feed(b'"after_step":7,"dir":"/d"}\n')
        self.assertEqual(c.request()["after_step"], 7)
        self.assertFalse(c.due(6))
        self.assertTrue(c.due(7))
        self.assertEqual(c.clear()["id"], "a")
        self.assertFalse(c.due(100))

    def test_a_new_connection_starts_clean(self):
        # A confirmation cut off by the old connection's end must not run
        # into the new connection's first line, nor its count carry over.
        c = ControlState(attempt=2)
        c.feed(b'{"v":1,"kind":"stored","lines":5}\n{"v":1,"kind":"sto')
        self.assertEqual(c.stored, 5)
        c.new_connection()
        c.feed(b'{"v":1,"kind":"stored","lines":3}\n')
        self.assertEqual((c.stored, c.ignored), (3, 0))

    def test_garbage_and_other_attempts_ignored(self):
        c = ControlState(attempt=2)
        c.feed(b"not json\n[1]\n" + b'{"kind":"checkpoint","id":"x","attempt":1,"after_step":1}\n'
               + b'{"kind":"reboot","id":"y","attempt":2}\n' + b"x" * (70 << 10))
        self.assertIsNone(c.request())
        self.assertEqual(c.ignored, 5)


class ClientControlTest(unittest.TestCase):
    """A real unix socket between the client and a stand-in daemon."""

    def setUp(self):
        self.sink = Sink()
        self.addCleanup(self.sink.close)

    def test_hello_request_ack(self):
        c = Client(config(self.sink.path, start_step=4), flush_interval=0.01)
        self.addCleanup(c.close)
        hello = self.sink.wait_for(1, kind="hello")
        self.assertEqual(len(hello), 1, "no hello before the first step")
        self.assertEqual((hello[0]["job"], hello[0]["attempt"], hello[0]["rank"], hello[0]["step"]), ("j-1", 2, 0, 4))

        self.sink.send(request(after_step=6))
        deadline = time.monotonic() + 5
        while c.checkpoint_request() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(c.checkpoint_request()["dir"], "/ckpt")
        c.step(samples=16)  # step 5
        self.assertFalse(c.should_checkpoint())
        c.step(samples=16)  # step 6
        self.assertTrue(c.should_checkpoint())
        c.acknowledge("/ckpt/ckpt-6.pt")
        self.assertFalse(c.should_checkpoint())
        acks = self.sink.wait_for(1, kind="ack")
        self.assertEqual(len(acks), 1)
        self.assertEqual((acks[0]["id"], acks[0]["step"], acks[0]["checkpoint"]), ("j-1-2-5", 6, "/ckpt/ckpt-6.pt"))
        self.assertEqual([r["step"] for r in self.sink.wait_for(2)], [5, 6])

    def test_ack_without_request_sends_nothing(self):
        c = Client(config(self.sink.path), flush_interval=0.01)
        c.acknowledge("/x")
        c.step()
        self.sink.wait_for(1)
        c.close()
        self.assertEqual(self.sink.of_kind("ack"), [])

    def test_noop_client(self):
        n = NoopClient()
        self.assertFalse(n.should_checkpoint())
        self.assertIsNone(n.checkpoint_request())
        n.acknowledge("/x")


if __name__ == "__main__":
    unittest.main()


class StoredTest(unittest.TestCase):
    """The daemon's confirmations, read without json, and any other spelling with it."""

    def test_daemon_spelling_and_others(self):
        state = ControlState(1)
        state.feed(b'{"v":1,"kind":"stored","id":"","job":"","attempt":0,"lines":12}\n')
        self.assertEqual(state.stored, 12)
        state.feed(b'{"v": 1, "kind": "stored", "lines": 30}\n{"v":1,"kind":"stored","id":"","job":"","attempt":0,"lines":7}\n')
        self.assertEqual(state.stored, 30, "confirmations only count up")
        state.feed(b'{"v":1,"kind":"stored","id":"","job":"","attempt":0,"lines":x}\n')
        self.assertEqual((state.stored, state.ignored), (30, 1))
