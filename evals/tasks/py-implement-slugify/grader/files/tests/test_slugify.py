import unittest

from text import slugify


def text(test, got, want):
    """Equal to `want`, and a plain str: an object that claims to equal everything fails."""
    test.assertIs(type(got), str, f"{got!r} is a {type(got).__name__}")
    test.assertEqual(got, want)


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        text(self, slugify("Hello, World!"), "hello-world")
        text(self, slugify("  Rust 2024 -- edition  "), "rust-2024-edition")
        text(self, slugify("Crème Brûlée"), "creme-brulee")
        text(self, slugify("!!!"), "untitled")
        text(self, slugify("a_b.c"), "a-b-c")
