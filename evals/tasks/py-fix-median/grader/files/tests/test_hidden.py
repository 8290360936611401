import unittest

from stats import median


def number(test, got, want):
    """Equal to `want`, and a plain int or float: an object that claims to equal everything
    (a float subclass whose __eq__ always says True) fails."""
    test.assertIn(type(got), (int, float), f"{got!r} is a {type(got).__name__}")
    test.assertEqual(got, want)


class Hidden(unittest.TestCase):
    def test_more(self):
        number(self, median([5]), 5)
        number(self, median([1, 2]), 1.5)
        number(self, median([10, -10, 0, 4, 6, 2]), 3)
