"""The family registry (emmy/families/) is complete: each folder is a family whose kind's
parts the type checker checks, every `.emmy` kernel has an entry, every graph op a family,
and lowering reads the registry without torch."""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
from xdsl.passes import ModulePass

from emmy import compiler
from emmy.base.compile_options import CompileOptions
from emmy.base.device_records import BufferArg, VendorAttention, VendorConv, VendorConvWeight
from emmy.base.errors import EmmyError
from emmy.base.problem_key import SiteRef
from emmy.cli import main
from emmy.dialects import graph
from emmy.dsl.library import declaration, declarations
from emmy.families import conv_path, conv_weight_path
from emmy.families.attention_path import PATHS
from emmy.families.family import ChoiceFamily, HostCallFamily, KernelFamily, MeasuredFamily
from emmy.families.matmul_path import OPTIONS
from emmy.families.registry import discover, of_kind, registered_as
from emmy.frontend.cache import parse_graph
from emmy.passes.fuse_graph import FuseGraph
from emmy.program import host_call_of
from emmy.sites.fork_space import ForkSpace


def _family_folders(root: Path, folders: dict[str, str]) -> ModuleType:
    """A package of family folders under `root`: each folder's `__init__.py` text."""
    package = root / "planted_families"
    for name, text in folders.items():
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text(text)
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("planted_families")
    finally:
        sys.path.remove(str(root))


KERNEL_ENTRY = (
    "from emmy.families.family import KernelFamily\n"
    "FAMILY = KernelFamily('{name}', reference=None, check_keys=None, check_inputs=None)\n"
)


def test_the_registry_finds_each_folder_and_a_kernel_family_needs_its_declaration(
    tmp_path, monkeypatch
) -> None:
    """A folder is a family; a kernel family's folder without its `.emmy`, or a folder whose
    entry is named otherwise, is a one-line error naming the folder."""
    monkeypatch.delitem(sys.modules, "planted_families", raising=False)
    package = _family_folders(tmp_path, {"double": KERNEL_ENTRY.format(name="double")})
    with pytest.raises(
        EmmyError, match=r"planted_families/double: kernel family double has no double\.emmy"
    ):
        discover(package)
    (tmp_path / "planted_families" / "double" / "double.emmy").write_text("")
    assert list(discover(package)) == ["double"]
    (tmp_path / "planted_families" / "half").mkdir()
    (tmp_path / "planted_families" / "half" / "__init__.py").write_text(
        KERNEL_ENTRY.format(name="double")
    )
    with pytest.raises(EmmyError, match=r"half/__init__.py: FAMILY is not a family named 'half'"):
        discover(package)


def test_every_library_kernel_has_a_registry_entry() -> None:
    unregistered = set(declarations()) - set(of_kind(KernelFamily))
    assert not unregistered, (
        f"kernels with no folder of their own in emmy/families/: {unregistered}"
    )


def test_every_graph_op_but_views_has_one_family() -> None:
    unlowered = (graph.ReshapeOp, graph.ConstantOp, graph.FusedOp, graph.YieldOp)
    for op in graph.Graph.operations:
        if issubclass(op, unlowered):
            continue
        owners = [
            e.name
            for e in of_kind(MeasuredFamily).values()
            if e.lowers is not None and issubclass(op, e.lowers.ops)
        ]
        assert len(owners) == 1, f"{op.name} is implemented by {owners or 'no family'}"


@pytest.mark.parametrize("name", list(of_kind(KernelFamily)))
def test_check_keys_are_keys_of_the_kernel_and_its_reference_runs(name: str) -> None:
    entry = registered_as(name, KernelFamily)
    dtype = entry.check_dtypes[0]
    keys = entry.check_keys(dtype)
    assert keys
    for key in keys:
        assert list(ForkSpace.of(declaration(name)).configs(key)), f"{name} {key}: no valid config"
    expected = entry.reference(keys[0], entry.check_inputs(keys[0], dtype, torch.Generator()))
    assert isinstance(expected, (torch.Tensor, tuple))


def test_an_entry_asked_for_as_another_kind_is_a_one_line_error() -> None:
    assert isinstance(registered_as("softmax", MeasuredFamily), KernelFamily)
    with pytest.raises(EmmyError, match="family 'softmax' is a KernelFamily, not a ChoiceFamily"):
        registered_as("softmax", ChoiceFamily)
    with pytest.raises(EmmyError, match="family 'no_such' has no registry entry"):
        registered_as("no_such", KernelFamily)


def test_choice_families_offer_the_options_their_passes_build() -> None:
    assert registered_as("attention_path", ChoiceFamily).forks == {"path": PATHS}
    assert registered_as("attention_backward_path", ChoiceFamily).forks == {
        "path": ("fused", "sdpa")
    }
    assert registered_as("matmul_path", ChoiceFamily).forks == {"matmul": OPTIONS}
    assert registered_as("conv_path", ChoiceFamily).forks == {conv_path.KNOB: conv_path.OPTIONS}
    assert registered_as("conv_weight_path", ChoiceFamily).forks == {
        "conv_weight": conv_weight_path.OPTIONS
    }
    assert set(of_kind(HostCallFamily)) == {
        "vendor_matmul",
        "vendor_attention",
        "vendor_attention_backward",
        "vendor_conv",
        "vendor_conv_weight",
    }


def test_a_host_call_family_says_what_torch_runs_and_how_it_views_each_buffer() -> None:
    """A masked grouped-query attention is viewed in the mask's batch as SDPA's groups (the
    mask broadcast over the heads of its group); a convolution keeps its geometry."""
    q, k, v, mask, o = (BufferArg(name) for name in ("q", "k", "v", "mask", "o"))
    key = "bh=8,kv_bh=4,q_len=5,kv_len=7,d=16,causal=yes,scale=0.25,masked=yes,batch=2,"
    site = SiteRef.parse("vendor_attention", key + "mask_rows=5,T=bf16")
    attention = host_call_of(site, (q, k, v, mask, o))
    assert attention == VendorAttention(
        (q, k, v, mask, o),
        ((2, 4, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16), (2, 1, 5, 7), (2, 4, 5, 16)),
        "bf16",
        causal=True,
        scale=0.25,
    )
    grad, dq, dk, dv = (BufferArg(name) for name in ("do", "dq", "dk", "dv"))
    site = SiteRef.parse("vendor_attention_backward", key + "mask_rows=5,T=bf16")
    backward = host_call_of(site, (q, k, v, grad, mask, dq, dk, dv))
    assert backward.shapes == (
        (2, 4, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16), (2, 4, 5, 16), (2, 1, 5, 7),
        (2, 4, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16),
    )  # fmt: skip
    geometry = {"kh": 3, "kw": 1, "sh": 2, "sw": 1, "ph": 1, "pw": 0, "dh": 1, "dw": 2}
    sizes = {"batch": 2, "cin": 4, "h": 9, "w": 8, "cout": 6, "oh": 5, "ow": 8}
    conv = registered_as("vendor_conv", HostCallFamily).host_call
    call = conv({**sizes, **geometry, "groups": 2, "cpg": 2, "has_bias": 1, "T": "f32"}, ())
    assert call == VendorConv(
        (),
        ((2, 4, 9, 8), (6, 2, 3, 1), (6,), (2, 6, 5, 8)),
        "f32",
        stride=(2, 1),
        padding=(1, 0),
        dilation=(1, 2),
        groups=2,
    )
    transposed = conv({**sizes, **geometry, "groups": 2, "cpg": 2, "has_bias": 0,
                       "T": "f32", "oh": 17, "transposed": 1}, ())  # fmt: skip
    assert transposed.shapes == ((2, 4, 9, 8), (4, 3, 3, 1), (2, 6, 17, 8))
    assert transposed.output_padding == (0, 0)
    weight = registered_as("vendor_conv_weight", HostCallFamily).host_call
    call = weight({**sizes, **geometry, "groups": 2, "cpg": 2, "T": "bf16"}, ())
    assert call == VendorConvWeight(
        (),
        ((2, 6, 5, 8), (2, 4, 9, 8), (6, 2, 3, 1)),
        "bf16",
        stride=(2, 1),
        padding=(1, 0),
        dilation=(1, 2),
        groups=2,
    )
    with pytest.raises(EmmyError, match="no host call runs family 'softmax'"):
        host_call_of(SiteRef.parse("softmax", "rows=1,cols=1,T=f32"), ())


def test_lowering_and_the_registry_import_without_torch() -> None:
    code = (
        "import sys; import emmy.families.registry, emmy.passes.pipeline, emmy.compiler; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_a_pass_that_breaks_the_ir_is_named_under_verify_each(monkeypatch) -> None:
    """With verify_each, the module is verified after every pass: a pass whose output does
    not verify (here, fused ops left without their yield) is named."""

    @dataclass(frozen=True)
    class DropYields(ModulePass):
        name = "drop-yields"

        def apply(self, ctx, op) -> None:
            for yielded in [o for o in op.walk() if isinstance(o, graph.YieldOp)]:
                yielded.detach()
                yielded.erase(safe_erase=False)

    pipeline = list(compiler.COMPILE_PIPELINE)
    pipeline.insert(pipeline.index(FuseGraph) + 1, DropYields)
    monkeypatch.setattr(compiler, "COMPILE_PIPELINE", tuple(pipeline))
    text = """
    func.func @main(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
      func.return %y : tensor<4x8xf32>
    }
    """
    with pytest.raises(EmmyError, match="the IR is invalid after pass drop-yields: "):
        options = CompileOptions(db=None)
        compiler.compile_graph(parse_graph(text, "<test>"), options, verify_each=True)


def test_emmy_compile_verifies_each_pass_on_request(capsys) -> None:
    code = main(
        [
            "compile",
            "-c",
            "torch.softmax(torch.randn(4, 8) * 2, -1)",
            "--target",
            "emu",
            "--verify-each",
        ]
    )
    assert code == 0, capsys.readouterr().err
