"""README.md's install of the python client, run as written (python/build_backend.py).

The block of README.md that installs ./python runs in a directory like a
clone's (its python/ is the repository's), with Debian's python, then, when
there is one, with another python 3 (its venv without --system-site-packages
and without torch): each venv holds the package, built offline by the
standard library alone, and imports it from its own site-packages.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBIAN_PYTHON = "/usr/bin/python3"


def readme_install_block() -> str:
    """The ```sh block of README.md that runs `pip install ./python`."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if "pip install ./python" in block:
            return block
    raise AssertionError("README.md has no sh block with `pip install ./python`")


class InstallTest(unittest.TestCase):
    def run_block(self, block: str) -> str:
        tmp = tempfile.mkdtemp(prefix="scav-install-")
        self.addCleanup(shutil.rmtree, tmp)
        os.symlink(os.path.join(ROOT, "python"), os.path.join(tmp, "python"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_INDEX_URL")}
        env["PIP_NO_INDEX"] = "1"  # offline, whatever the machine can reach
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        p = subprocess.run(["/bin/sh", "-e", "-c", block], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, block + "\n" + p.stdout + p.stderr)
        self.assertFalse(os.path.exists(os.path.join(ROOT, "python", "build")), "the build wrote into the source tree")
        return p.stdout

    @unittest.skipUnless(os.path.exists(DEBIAN_PYTHON), "no Debian python")
    def test_readme_block_with_debians_python(self):
        block = readme_install_block()
        self.assertIn(DEBIAN_PYTHON + " -m venv --system-site-packages .venv", block)
        out = self.run_block(block)
        self.assertRegex(out, r"/\.venv/lib/python3\.\d+/site-packages/scavenger/__init__\.py")

    def test_readme_block_with_another_python(self):
        other = [p for p in (shutil.which("python3"), sys.executable)
                 if p and os.path.realpath(p) != os.path.realpath(DEBIAN_PYTHON)]
        if not other:
            self.skipTest("no python 3 here but Debian's")
        block = readme_install_block().replace(DEBIAN_PYTHON + " -m venv --system-site-packages", other[0] + " -m venv")
        block = block.replace("import scavenger, scavenger.torch;", "import scavenger;")
        out = self.run_block(block)
        self.assertRegex(out, r"/\.venv/lib/python3\.\d+/site-packages/scavenger/__init__\.py")


if __name__ == "__main__":
    unittest.main()
