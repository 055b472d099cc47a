"""The families of host-level choices: sites with no kernel of their own whose one fork
picks an option of a `fork.alternatives` (attention's path, a matmul's kernel, split of k
or vendor library), with their forks and options, as golden files and benches see them."""

from __future__ import annotations

from emmy.passes import attention_paths, matmul_paths

CHOICE_FAMILIES: dict[str, dict[str, list[str]]] = {
    attention_paths.FAMILY: {"path": list(attention_paths.PATHS)},
    matmul_paths.FAMILY: {matmul_paths.KNOB: list(matmul_paths.OPTIONS)},
}
#: families of sites the device runs as host calls (no emitted kernel)
HOST_FAMILIES = (matmul_paths.VENDOR_FAMILY,)
