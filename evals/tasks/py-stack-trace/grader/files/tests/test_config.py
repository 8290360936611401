import os
import tempfile
import unittest

from config import load


def write(text):
    fd, path = tempfile.mkstemp(suffix=".ini", dir=".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def config(test, got, want):
    """Equal to `want`, and a plain dict of plain str and int values: an object that claims to
    equal everything fails."""
    test.assertIs(type(got), dict, f"{got!r} is a {type(got).__name__}")
    for key, value in got.items():
        test.assertIs(type(key), str)
        test.assertIn(type(value), (str, int), f"{value!r} is a {type(value).__name__}")
    test.assertEqual(got, want)


class ConfigTest(unittest.TestCase):
    def test_full(self):
        config(self, load(write("host = example.org\nport = 9000\n")), {"host": "example.org", "port": 9000})

    def test_missing_port_defaults(self):
        config(self, load(write("host = a\n")), {"host": "a", "port": 8080})

    def test_bad_port(self):
        with self.assertRaises(ValueError) as e:
            load(write("port = eighty\n"))
        self.assertIn("eighty", str(e.exception))
