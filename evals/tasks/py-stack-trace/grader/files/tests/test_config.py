import os
import tempfile
import unittest

from config import load


def write(text):
    fd, path = tempfile.mkstemp(suffix=".ini", dir=".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


class ConfigTest(unittest.TestCase):
    def test_full(self):
        self.assertEqual(load(write("host = example.org\nport = 9000\n")), {"host": "example.org", "port": 9000})

    def test_missing_port_defaults(self):
        self.assertEqual(load(write("host = a\n")), {"host": "a", "port": 8080})

    def test_bad_port(self):
        with self.assertRaises(ValueError) as e:
            load(write("port = eighty\n"))
        self.assertIn("eighty", str(e.exception))
