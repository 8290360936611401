import unittest

from stats import median


class Hidden(unittest.TestCase):
    def test_more(self):
        self.assertEqual(median([5]), 5)
        self.assertEqual(median([1, 2]), 1.5)
        self.assertEqual(median([10, -10, 0, 4, 6, 2]), 3)
