"""The frontend's op registry: which ops convert, which entry converts each, and whether a
node is supported, asked without converting it."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from emmy.base.errors import EmmyError
from emmy.base.pointwise_ops import BY_ATEN
from emmy.frontend.aten import ATEN
from emmy.frontend.converter import handler_for, supported_ops
from emmy.frontend.converter import supports as model_supports
from emmy.frontend.export import convert, export, export_program
from emmy.frontend.expression import _WholeOps, trace
from emmy.frontend.op_registry import OpRegistry

#: every op the converter took before the registry (its tables VIEW_OPS, IDENTITY_OPS,
#: NO_OPS, COPY_OPS, HANDLERS with REDUCTIONS, UNARY_OPS), so that none drops out unseen
CONVERTED_BY_NAME = {
    # views
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.transpose.int",
    "aten.permute.default",
    "aten.t.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.squeeze.default",
    "aten.flatten.using_ints",
    "aten.unflatten.int",
    "aten.expand.default",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.narrow.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.chunk.default",
    "aten.unbind.int",
    # identities, checks, copies
    "aten.dropout.default",
    "aten.lift_fresh_copy.default",
    "aten.lift_fresh.default",
    "aten._assert_tensor_metadata.default",
    "aten.contiguous.default",
    "aten.clone.default",
    "aten._to_copy.default",
    "prims.convert_element_type.default",
    "prims.fma.default",
    "aten.native_dropout.default",
    "aten.to.dtype",
    "aten.to.dtype_layout",
    "aten.to.device",
    "aten.type_as.default",
    "aten.copy.default",
    # handlers
    "aten.addmm.default",
    "aten.native_layer_norm.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten.linear.default",
    "aten.matmul.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.layer_norm.default",
    "aten.rms_norm.default",
    "aten.softmax.int",
    "aten._softmax.default",
    "aten.embedding.default",
    "aten.scaled_dot_product_attention.default",
    "aten.gelu.default",
    "emmy.rope.default",
    "emmy.cached_attention.default",
    "aten.sum.dim_IntList",
    "aten.mean.dim",
    "aten.amax.default",
    # unary
    "aten.exp.default",
    "aten.tanh.default",
    "aten.sigmoid.default",
    "aten.silu.default",
    "aten.relu.default",
    "aten.neg.default",
    # indexing and data movement
    "aten.index_select.default",
    "aten.gather.default",
    "aten.index.Tensor",
    "aten.flip.default",
    "aten.roll.default",
    "aten.triu.default",
    "aten.tril.default",
    "aten.repeat.default",
    "aten.cat.default",
    "aten.stack.default",
    "aten.constant_pad_nd.default",
    "aten.pad.default",
    "aten.slice_scatter.default",
    "aten.select_scatter.default",
    "aten.index_copy.default",
    "aten.scatter.value",
    "aten.scatter.src",
    # shape-only ops, computed at compile time
    "aten.zeros_like.default",
    "aten.ones_like.default",
    "aten.full_like.default",
    "aten.empty_like.default",
    "aten.new_zeros.default",
    "aten.new_ones.default",
    "aten.new_full.default",
    "aten.new_empty.default",
}
#: the arithmetic ops, converted by their name before the overload (aten.add.*)
ARITHMETIC = {
    f"aten.{op}.{overload}"
    for op in ("add", "sub", "mul", "div", "rsub")
    for overload in ("Tensor", "Scalar")
}

#: the reductions, scans, norms and products added since (issue 15)
REDUCTIONS_AND_PRODUCTS = {
    *(f"aten.{op}.default" for op in ("sum", "mean", "max", "amin", "min", "prod", "any", "all")),
    *(f"aten.{op}.default" for op in ("argmax", "argmin", "logsumexp", "var", "std", "cumsum")),
    "aten.prod.dim_int",
    *(f"aten.{op}.{overload}" for op in ("any", "all") for overload in ("dim", "dims")),
    *(f"aten.{op}.{overload}" for op in ("var", "std") for overload in ("dim", "correction")),
    "aten.max.dim",
    "aten.min.dim",
    "aten.aminmax.default",
    *(f"aten.{op}_mean.{overload}" for op in ("var", "std") for overload in ("dim", "correction")),
    "aten._log_softmax.default",
    "aten.log_softmax.int",
    "aten._fused_rms_norm.default",
    "aten.batch_norm.default",
    "aten.native_batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten.mv.default",
    "aten.dot.default",
    "aten.addmv.default",
    "aten.baddbmm.default",
}

#: a training step's backward ops with kernels of their own (issue 35)
BACKWARD_OPS = {
    "aten._softmax_backward_data.default",
    "aten._log_softmax_backward_data.default",
    "emmy.layer_norm_backward.default",
    "emmy.rms_norm.default",
    "emmy.rms_norm_backward.default",
    "emmy.upsample2d.default",
    "emmy.upsample2d_backward.default",
    "emmy.embedding_backward.default",
    "emmy.attention_backward.default",
    "emmy.max_pool2d_backward.default",
    "emmy.avg_pool2d_backward.default",
    "emmy.conv2d_weight_gradient.default",
    "emmy.batch_norm_stats.default",
    "emmy.batch_norm_backward_sums.default",
    # the attentions SDPA becomes on a GPU, whose backward ops are decomposed
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
}

#: the smaller ops once left to torch (issue 26): cat's aliases, einsum, repeat_interleave,
#: as_strided (square is the pointwise table's)
SMALLER_OPS = {
    "aten.concat.default",
    "aten.concatenate.default",
    "aten.einsum.default",
    "aten.repeat_interleave.self_int",
    "aten.repeat_interleave.self_Tensor",
    "aten.as_strided.default",
}

#: pooling, upsampling and group norm (issue 26: the ops around convolutions)
AROUND_CONVOLUTIONS = {
    *(f"aten.{op}.default" for op in ("max_pool2d", "max_pool1d", "avg_pool2d", "avg_pool1d")),
    "aten.max_pool2d_with_indices.default",
    "aten.max_pool1d_with_indices.default",
    *(f"aten.adaptive_{op}_pool{d}d.default" for op in ("avg", "max") for d in (1, 2)),
    "aten._adaptive_avg_pool2d.default",
    *(
        f"aten.upsample_{mode}2d.{o}"
        for mode in ("nearest", "bilinear")
        for o in ("vec", "default")
    ),
    "aten._unsafe_index.Tensor",
    "aten.group_norm.default",
    "aten.native_group_norm.default",
}

#: the convolutions, transposed or not (1-D and 2-D, torch.export's names and AOTAutograd's)
CONVOLUTIONS = {
    *(f"aten.conv{d}d.{o}" for d in (1, 2) for o in ("default", "padding")),
    "aten.conv_transpose1d.default",
    "aten.conv_transpose2d.input",
    "aten.convolution.default",
}

#: a mixture of experts' routing and grouped matmul (issue 26)
MIXTURE_OF_EXPERTS = {
    "aten.topk.default",
    "aten.sort.default",
    "aten.sort.stable",
    "aten.histc.default",
    "aten.index_put.default",
    "aten._grouped_mm.default",
    "transformers.grouped_mm_fallback.default",
}


#: the ops of the pointwise table (every overload it names), glu (a split and a product)
#: and a conversion as Hugging Face models spell it (`mask.to(device, torch.bool)`)
POINTWISE_OPS = set(BY_ATEN) | {"aten.glu.default", "aten.to.device"}


def test_the_supported_ops_are_those_converted_before_the_pointwise_table_and_reductions():
    assert (
        supported_ops()
        == CONVERTED_BY_NAME
        | ARITHMETIC
        | POINTWISE_OPS
        | REDUCTIONS_AND_PRODUCTS
        | SMALLER_OPS
        | AROUND_CONVOLUTIONS
        | CONVOLUTIONS
        | MIXTURE_OF_EXPERTS
        | BACKWARD_OPS
    )


def test_each_supported_op_has_its_entry_and_no_other_op_has_one():
    for name in supported_ops():
        assert handler_for(name) is not None, name
    assert handler_for("aten.argsort.default") is None
    assert handler_for("aten.linear.default").claims is None
    assert handler_for("aten.add.Tensor").claims is not None
    assert handler_for("aten.softmax.int") is handler_for("aten._softmax.default")


def test_the_tracer_records_whole_only_ops_that_convert():
    for name in _WholeOps.WHOLE.values():
        assert f"aten.{name}.default" in supported_ops()


def _node(target: object, value: object = None) -> fx.Node:
    node = fx.Graph().call_function(target, ())
    node.meta["val"] = value
    return node


def test_exact_entries_come_before_class_entries_then_classes_in_order():
    ops = OpRegistry()

    @ops.handles_class(lambda node: "add" in str(node.target), members=["aten.add.Tensor"])
    def first_class(converter, node):
        return "first class"

    @ops.handles_class(lambda node: True)
    def second_class(converter, node):
        return "second class"

    @ops.handles("aten.add.Tensor")
    def exact(converter, node):
        return "exact"

    def converted(target: object) -> str:
        return ops.entry_for(_node(target)).handler(None, None)

    assert converted(torch.ops.aten.add.Tensor) == "exact"
    assert converted(torch.ops.aten.add.Scalar) == "first class"
    assert converted(torch.ops.aten.mul.Tensor) == "second class"
    assert ops.handler_for("aten.add.Tensor").handler is exact
    assert ops.supported_ops() == {"aten.add.Tensor"}


def test_an_op_is_registered_once():
    ops = OpRegistry()
    ops.handles("aten.exp.default")(lambda converter, node: None)
    with pytest.raises(ValueError, match="aten.exp.default is registered twice"):
        ops.handles("aten.exp.default")(lambda converter, node: None)


def test_sizes_and_items_are_supported_though_not_ops():
    assert model_supports(_node(torch.ops.aten.sym_size.int, 4))
    assert model_supports(_node(torch.ops.aten.sym_size.int, 4)).reason is None
    assert not model_supports(_node(torch.ops.aten.sym_size.int, torch.empty(1)))
    assert "aten.sym_size.int" not in supported_ops()


def test_a_node_whose_value_is_a_number_is_a_size_whatever_its_op():
    """Class entries claim in the order emmy.frontend.aten imports their modules: sizes
    before getitem and the pointwise table (either would read the converter, None here)."""
    for target in (operator.getitem, torch.ops.aten.mul.Tensor):
        node = _node(target, 4)
        assert ATEN.entry_for(node).handler(None, node) == 4


class Median(nn.Module):
    def forward(self, x):
        return torch.median(x)


def test_an_unsupported_op_fails_in_one_line_naming_it_and_where():
    with pytest.raises(EmmyError) as traced:
        trace("torch.median(torch.randn(4, 10))", meta=True, fallback=False)
    assert str(traced.value) == "unsupported op aten.median.default (node median_default)"
    with pytest.raises(EmmyError) as exported:
        export(Median(), (torch.randn(4, 8),), fallback=False)
    message = str(exported.value)
    assert message.startswith("unsupported op aten.median.default (node median at "), message
    assert message.endswith(" (forward))") and "test_op_registry.py:" in message, message
    assert "\n" not in message


class SumToHalf(nn.Module):
    def forward(self, x):
        return torch.relu(x).sum((0, 1), dtype=torch.float16)


class HalfSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1, dtype=torch.float16)


class DropoutAttention(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


class IntegerMatmul(nn.Module):
    def forward(self, x):
        return x @ x


REFUSED = [
    pytest.param(SumToHalf(), (torch.randn(2, 3, 4),), "to torch.float16", id="sum-dtype"),
    pytest.param(Median(), (torch.randn(4, 8),), "unsupported op aten.median", id="median"),
    pytest.param(HalfSoftmax(), (torch.randn(4, 8),), "dtype conversion", id="softmax-dtype"),
    pytest.param(DropoutAttention(), (torch.randn(1, 2, 4, 8),), "with dropout", id="sdpa-dropout"),
    pytest.param(
        IntegerMatmul(),
        (torch.ones(4, 4, dtype=torch.int64),),
        "a product of torch.int64 tensors",
        id="integer-matmul",
    ),
]


@pytest.mark.parametrize(("module", "inputs", "words"), REFUSED)
def test_supports_refuses_ahead_what_converting_refuses(module, inputs, words):
    exported = export_program(module, inputs)
    ops = [node for node in exported.graph.nodes if node.op == "call_function"]
    refused = [node for node in ops if not model_supports(node)]
    assert len(refused) == 1, [str(node.target) for node in ops]
    reason = model_supports(refused[0]).reason
    assert words in reason, reason
    with pytest.raises(EmmyError) as error:
        convert(exported, inputs, fallback=False)
    assert str(error.value).startswith(f"{reason} (node {refused[0].name}"), str(error.value)


def test_supports_takes_every_node_of_a_model_that_converts():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16)).eval()
    exported = export_program(model, (torch.randn(4, 8),))
    ops = [node for node in exported.graph.nodes if node.op == "call_function"]
    assert ops and all(model_supports(node) for node in ops)
    convert(exported, (torch.randn(4, 8),))
