"""scavenger.api without a daemon: arguments it refuses and where it looks.

The API against a real scavd is tested from Go (cmd/scavctl,
TestPythonAPIRunsAndFollowsJobs)."""

import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import scavenger  # noqa: E402
from scavenger import api  # noqa: E402


class TestAPIWithoutDaemon(unittest.TestCase):
    def test_workers_do_not_load_http(self):
        code = ("import sys; sys.path.insert(0, %r); import scavenger; "
                "print('http.client' in sys.modules)" % os.path.join(os.path.dirname(__file__), ".."))
        import subprocess
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")

    def test_no_daemon_names_every_place_and_the_fix(self):
        with tempfile.TemporaryDirectory() as d, \
                mock.patch.dict(os.environ, {"SCAV_STATE_DIR": d, "SCAV_API": ""}):
            with self.assertRaises(scavenger.DaemonError) as cm:
                scavenger.jobs()
        msg = str(cm.exception)
        self.assertIn(os.path.join(d, "api.sock"), msg)
        self.assertIn("start one", msg)

    def test_search_order(self):
        with mock.patch.dict(os.environ, {"SCAV_API": "/x/api.sock"}):
            self.assertEqual(api._sockets(), ["/x/api.sock"])
        with mock.patch.dict(os.environ, {"SCAV_API": "", "SCAV_STATE_DIR": "/s"}):
            self.assertEqual(api._sockets(), ["/s/api.sock"])
        with mock.patch.dict(os.environ, {"SCAV_API": "", "SCAV_STATE_DIR": "", "STATE_DIRECTORY": "/u"}):
            self.assertEqual(api._sockets(), ["/u/api.sock", "/var/lib/scavenger/api.sock"])

    def test_tcp_api_is_refused_with_the_way(self):
        with self.assertRaisesRegex(scavenger.DaemonError, "scavctl --api"):
            api.Daemon("https://node:4234")

    def test_ranges(self):
        self.assertEqual(api._span("workers", 2), (2, 2))
        self.assertEqual(api._span("workers", (1, 4)), (1, 4))
        self.assertEqual(api._span("batch_size", None), (0, 0))
        for bad in [0, (4, 2), (0, 2), ("1", 2)]:
            with self.assertRaises(ValueError):
                api._span("workers", bad)

    def test_newest_of_a_name(self):
        old = {"id": "a-1", "created": "2026-12-01T10:00:00.5Z"}
        new = {"id": "a-2", "created": "2026-12-01T10:00:00.123456789Z"}
        newer = {"id": "a-3", "created": "2026-12-01T11:00:00+01:00"}
        self.assertEqual(max([old, new], key=api._created)["id"], "a-1")
        self.assertEqual(max([old, newer], key=api._created)["id"], "a-1")


if __name__ == "__main__":
    unittest.main()
