"""The handlers of ATen ops, one module per class of ops, each registering its entries in
`ATEN` as it is imported: importing this package fills the registry, which the converter
(emmy.frontend.converter) reads from here.

An exact entry claims its ops whatever order it was registered in; class entries claim in
the order their modules are imported: sizes and getitem (`plumbing`) before the pointwise
table (`pointwise`), so that a node whose value is a number is a size whatever its op.
"""

# isort: off
# class entries claim in this order
from emmy.frontend.aten import plumbing, pointwise

# isort: on
from emmy.frontend.aten import (
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

#: the modules whose handlers `ATEN` holds, those with class entries first in their order
HANDLER_MODULES = (
    plumbing,
    pointwise,
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

__all__ = ["ATEN", "HANDLER_MODULES"]
