"""Pairwise covering sets of configs: every option of every fork at least once, and every
pair of options of two forks together, among the valid configs (not the full product)."""

from __future__ import annotations

import itertools


def pairwise(configs: list[dict]) -> list[dict]:
    """A small subset of `configs` covering every pair of (fork, option) the set contains."""
    if not configs:
        return []
    names = list(configs[0])

    def pairs(config: dict) -> set:
        items = [(n, config[n]) for n in names]
        return set(itertools.combinations(items, 2)) | {(i,) for i in items}

    uncovered = set().union(*(pairs(c) for c in configs))
    chosen = []
    while uncovered:
        best = max(configs, key=lambda c: len(pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen
