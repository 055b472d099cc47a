"""The families of host-level choices (sites with no kernel of their own whose one fork
picks an option of a `fork.alternatives`) with their forks and options, and the families
the device runs as host calls: views of the registry (emmy.families.registry), which
declares them."""

from __future__ import annotations

from emmy.families.family import FamilyKind
from emmy.families.registry import choice_forks, of_kind

CHOICE_FAMILIES: dict[str, dict[str, list[str]]] = choice_forks()
#: families of sites the device runs as host calls (no emitted kernel)
HOST_FAMILIES = tuple(of_kind(FamilyKind.HOST_CALL))
