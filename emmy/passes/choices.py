"""The families of host-level choices: sites with no kernel of their own whose one fork
picks an option of a `fork.alternatives` (attention's path, a matmul's split of k), with
their forks and options, as golden files and benches see them."""

from __future__ import annotations

from emmy.passes import attention_paths, split_k

CHOICE_FAMILIES: dict[str, dict[str, list]] = {
    attention_paths.FAMILY: {"path": list(attention_paths.PATHS)},
    split_k.FAMILY: {split_k.KNOB: list(split_k.SPLITS)},
}


def option_name(value: int | str) -> str:
    """The name of a choice's option among its alternatives' regions."""
    return str(value)
