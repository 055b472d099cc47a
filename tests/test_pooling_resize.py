"""The ops around convolutions run natively: max and average pooling (1-D and 2-D, with
padding, dilation, ceil_mode, count_include_pad, a divisor and max pooling's indices),
adaptive pooling, nearest and bilinear upsampling and GroupNorm, through emmy.compile and
torch.compile alike, on the emulator, against eager, with no fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy
import emmy.api
from emmy.runtime.emu import EmuDevice

F32 = {"atol": 1e-5, "rtol": 1e-5}


def _run(api: str, model: nn.Module, x: torch.Tensor) -> tuple[object, list]:
    """The model's output through `api` and the targets of the ops that fell back."""
    if api == "emmy":
        compiled = emmy.compile(model, x, device=EmuDevice())
        return compiled(x), [e["target"] for e in compiled.program.fallbacks.values()]
    torch._dynamo.reset()
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    try:
        with torch.no_grad():
            out = compiled(x)
    finally:
        torch._dynamo.reset()
    assert programs, "emmy compiled no graph (it ran eagerly)"
    return out, [e["target"] for p in programs for e in p.fallbacks.values()]


class MaxPools(nn.Module):
    """ResNet's stem pool, a pool whose indices are returned, a dilated one in ceil_mode."""

    def __init__(self):
        super().__init__()
        self.stem = nn.MaxPool2d(3, 2, 1)
        self.indexed = nn.MaxPool2d(2, return_indices=True)
        self.dilated = nn.MaxPool2d((2, 3), (3, 2), 1, dilation=2, ceil_mode=True)

    def forward(self, x):
        values, indices = self.indexed(x)
        return self.stem(x), values, indices, self.dilated(x)


class AvgPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.uncounted = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
        self.counted = nn.AvgPool2d((3, 2), 2, (1, 0), ceil_mode=True)
        self.divided = nn.AvgPool2d(2, divisor_override=3)

    def forward(self, x):
        return self.uncounted(x), self.counted(x), self.divided(x)


class AdaptivePools(nn.Module):
    """Every classifier head's global pool, torchvision's 7x7 from a size no multiple of
    7, and adaptive max pooling with its indices."""

    def __init__(self):
        super().__init__()
        self.head = nn.AdaptiveAvgPool2d((1, 1))
        self.seven = nn.AdaptiveAvgPool2d((7, 7))
        self.max = nn.AdaptiveMaxPool2d((4, 5), return_indices=True)

    def forward(self, x):
        return self.head(x).flatten(1), self.seven(x), *self.max(x)


class Pools1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.max = nn.MaxPool1d(3, 2, 1)
        self.indexed = nn.MaxPool1d(2, return_indices=True)
        self.avg = nn.AvgPool1d(3, 2, ceil_mode=True)

    def forward(self, x):
        x = x.flatten(2)
        adaptive = F.adaptive_avg_pool1d(x, 5), F.adaptive_avg_pool1d(x, 1)
        return self.max(x), *self.indexed(x), self.avg(x), *adaptive, F.adaptive_max_pool1d(x, 4)


class Upsamples(nn.Module):
    def __init__(self):
        super().__init__()
        self.nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.nearest_sized = nn.Upsample(size=(13, 15), mode="nearest")
        self.bilinear = nn.Upsample(scale_factor=2, mode="bilinear")
        self.aligned = nn.Upsample(size=(13, 15), mode="bilinear", align_corners=True)

    def forward(self, x):
        return (
            self.nearest(x),
            self.nearest_sized(x),
            self.bilinear(x),
            self.aligned(x),
            F.interpolate(x, scale_factor=2),
        )


class GroupNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.GroupNorm(2, 4, eps=1e-3)
        self.plain = nn.GroupNorm(4, 4, affine=False)
        with torch.no_grad():  # weights away from their ones and zeros
            self.affine.weight.normal_()
            self.affine.bias.normal_()

    def forward(self, x):
        computed = x.mean((0, 2, 3))  # a weight the model computes: no constant
        return self.affine(x), self.plain(x * 3 + 1), F.group_norm(x, 2, computed, computed)


MODULES = {
    "max_pools": (MaxPools, (2, 3, 9, 11)),
    "avg_pools": (AvgPools, (2, 3, 9, 11)),
    "adaptive_pools": (AdaptivePools, (2, 3, 9, 11)),
    "pools_1d": (Pools1d, (2, 3, 1, 11)),
    "upsamples": (Upsamples, (2, 3, 5, 7)),
    "group_norms": (GroupNorms, (2, 4, 5, 7)),
}


@pytest.mark.parametrize("api", ["emmy", "torch.compile"])
@pytest.mark.parametrize("name", list(MODULES))
def test_the_ops_around_convolutions_match_eager_natively(name: str, api: str) -> None:
    torch.manual_seed(0)
    cls, shape = MODULES[name]
    model = cls().eval()
    x = torch.randn(*shape)
    out, fell_back = _run(api, model, x)
    with torch.no_grad():
        expected = model(x)
    assert len(out) == len(expected)
    for actual, wanted in zip(out, expected, strict=True):
        assert actual.dtype == wanted.dtype and actual.shape == wanted.shape
        torch.testing.assert_close(actual, wanted, **F32)
    assert fell_back == []
