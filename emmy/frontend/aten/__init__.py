"""The handlers of ATen ops, one module per class of ops, each registering its entries in
`ATEN` as it is imported: importing this package fills the registry, which the converter
(emmy.frontend.converter) reads from here.

An exact entry claims its ops whatever order it was registered in; class entries claim in
the order their modules are imported: sizes and getitem (`plumbing`) before the pointwise
table (`pointwise`), so that a node whose value is a number is a size whatever its op.
"""

# isort: off
# class entries claim in this order
from emmy.frontend.aten import plumbing, pointwise  # noqa: F401

# isort: on
# imported for the entries they register in ATEN
from emmy.frontend.aten import (  # noqa: F401
    attention_ops,
    concatenation,
    convolutions,
    indexing,
    norms,
    pooling,
    products,
    reductions,
    routing,
    views,
)
from emmy.frontend.aten.common import ATEN

__all__ = ["ATEN"]
