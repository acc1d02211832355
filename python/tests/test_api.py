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

    def test_a_name_is_its_newest_job_and_a_prefix_must_be_unique(self):
        d = api.Daemon.__new__(api.Daemon)  # no socket: its calls are answered here
        listed = [{"id": "n-1", "name": "n"}, {"id": "n-2", "name": "n"}, {"id": "m-3", "name": "m"}]  # oldest first

        def call(verb, req):
            if verb == "job":
                raise scavenger.DaemonError("job %s: no such job" % req["job"])
            return listed
        d._call = call
        self.assertEqual(d.job("n")["id"], "n-2")
        self.assertEqual(d.job("m-")["id"], "m-3")
        with self.assertRaisesRegex(scavenger.DaemonError, "2 jobs' ids start with it"):
            d.job("n-")


if __name__ == "__main__":
    unittest.main()
