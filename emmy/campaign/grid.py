"""The key grid of the prior's dataset: one-site PyTorch expressions per family, from tiny
shapes to what the emulator runs in well under a second (`emmy campaign plan --grid`,
scripts/make-dataset), each family's declared by its registry entry (Family.grid)."""

from __future__ import annotations

from emmy.families.family import KernelFamily
from emmy.families.registry import of_kind


def grid() -> dict[str, list[tuple[str, str]]]:
    """Per group (a family, or the name its entry gives its group: `split_k`), the
    expressions of its keys with the pins of their compile: shapes from tiny to what the
    emulator runs in well under a second, ragged and round, in f32 and bf16."""
    return {
        entry.grid_group or name: entry.grid()
        for name, entry in of_kind(KernelFamily).items()
        if entry.grid is not None
    }
