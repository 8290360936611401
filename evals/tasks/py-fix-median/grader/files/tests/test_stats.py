import unittest

from stats import median


def number(test, got, want):
    """Equal to `want`, and a plain int or float: an object that claims to equal everything
    (a float subclass whose __eq__ always says True) fails."""
    test.assertIn(type(got), (int, float), f"{got!r} is a {type(got).__name__}")
    test.assertEqual(got, want)


class MedianTest(unittest.TestCase):
    def test_odd(self):
        number(self, median([3, 1, 2]), 2)

    def test_even(self):
        number(self, median([4, 1, 3, 2]), 2.5)
