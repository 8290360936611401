import unittest

from text import slugify


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  Rust 2024 -- edition  "), "rust-2024-edition")
        self.assertEqual(slugify("Crème Brûlée"), "creme-brulee")
        self.assertEqual(slugify("!!!"), "untitled")
        self.assertEqual(slugify("a_b.c"), "a-b-c")
