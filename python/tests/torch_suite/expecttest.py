"""The part of the `expecttest` package that torch.testing._internal needs
to import (Debian packages torch's test suite but not expecttest): ACCEPT and
a TestCase with assertExpectedInline. None of the distributed tests this
directory runs calls assertExpectedInline; it compares exactly if one does."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        self.assertMultiLineEqual(expect, actual)

    def assertExpected(self, actual, expect=None):  # noqa: N802
        self.assertMultiLineEqual(expect, actual)
