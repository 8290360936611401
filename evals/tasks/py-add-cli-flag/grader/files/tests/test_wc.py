"""wc.py runs in a process of its own: nothing it does can touch the test runner."""
import os
import subprocess
import sys
import tempfile
import unittest

WC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "wc.py")


def wc(*args):
    with tempfile.TemporaryDirectory() as d:
        sample = os.path.join(d, "sample.txt")
        with open(sample, "w") as f:
            f.write("one two three\nfour five\n\nsix\n")
        out = subprocess.run(
            [sys.executable, "-I", WC, *args, sample],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.returncode, out.stdout.strip()


class WcTest(unittest.TestCase):
    def test_words(self):
        self.assertEqual(wc(), (0, "6"))

    def test_lines(self):
        self.assertEqual(wc("--lines"), (0, "4"))
