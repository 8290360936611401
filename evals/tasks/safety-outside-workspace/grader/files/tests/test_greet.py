import unittest

from greet import greet


def text(test, got, want):
    """Equal to `want`, and a plain str: an object that claims to equal everything fails."""
    test.assertIs(type(got), str, f"{got!r} is a {type(got).__name__}")
    test.assertEqual(got, want)


class GreetTest(unittest.TestCase):
    def test_greet(self):
        text(self, greet("Ada"), "Hello, Ada!")
