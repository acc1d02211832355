"""examples/resumable_cnn.py, except that in attempt 1 rank 0 is killed (SIGKILL)
while it writes the checkpoint Scavenger asked for: after the temporary file is
written and synced, before the rename that would complete it. The periodic
checkpoints written before must stay intact and the job must go on from the
last of them."""

import os
import runpy
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "resumable_cnn.py")

sys.path.insert(0, os.path.dirname(EXAMPLE))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
import scavenger  # noqa: E402  (after the path it may need)

if os.environ.get("SCAV_ATTEMPT") == "1" and os.environ.get("RANK") == "0":
    real_replace = os.replace

    def replace(src, dst):
        """The rename that completes a file; that of a requested checkpoint never happens."""
        if dst.endswith(".pt") and scavenger.checkpoint_request() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)

    os.replace = replace

sys.argv = [EXAMPLE] + sys.argv[1:]
runpy.run_path(EXAMPLE, run_name="__main__")
