"""Importing the model libraries a test or a benchmark builds models from (transformers,
torchvision, diffusers) beside the CPU build of torch.

torchvision 0.28.0 from the package index is a CUDA build: its C extension does not load
under the CPU torch, and its Python side then fails at import on the missing operator
`torchvision::nms`. transformers and diffusers import torchvision whenever it is installed.
Defining the two operators' schemas first (their kernels stay absent: no model here calls
them) lets the pure-Python models import."""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

#: the operators torchvision's Python side registers fake kernels for at import
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_LIBRARY: list[torch.library.Library] = []  # kept alive: a dropped Library undefines its ops


def allow_torchvision() -> None:
    """Defines torchvision's operator schemas where its own extension has not: idempotent."""
    if _LIBRARY or _has_nms():
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        library.define(schema)
    _LIBRARY.append(library)


def _has_nms() -> bool:
    try:
        torch.ops.torchvision.nms  # noqa: B018 - the lookup raises where it is not defined
    except (AttributeError, RuntimeError):
        return False
    return True


def torchvision() -> ModuleType:
    return _test_extra("torchvision")


def transformers() -> ModuleType:
    return _test_extra("transformers")


def diffusers() -> ModuleType:
    return _test_extra("diffusers")


def _test_extra(name: str) -> ModuleType:
    """A package of the test extra, seconds to import: only the models built from it need it.
    Imported by name, so that the type checker does not read all of transformers (8 s)."""
    allow_torchvision()
    return importlib.import_module(name)
