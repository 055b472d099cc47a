"""Pairwise covering sets for the tests (the one implementation lives in emmy.check)."""

from emmy.check import pairwise

__all__ = ["pairwise"]
