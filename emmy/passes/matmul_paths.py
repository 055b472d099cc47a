"""A matmul's paths (offer-paths, after lower-sites): each matmul becomes an `alternatives`
fork between its one kernel, the vendor library (cuBLAS through torch on a GPU, the CPU's
BLAS on the emulator) with the epilogue as an emmy kernel of its own, and, where few output
tiles meet a deep k, split-K: `split` blocks per tile, each summing a k-slice into f32
parts, then a split_sum kernel that adds the parts and applies the epilogue. The `matmul`
knob of a `matmul_path` site decides, like any fork.

    %c = kernel.call @matmul_tc_0(%a, %b, %bias) : (...) -> tensor<16x768xbf16>
  →
    fork.site @matmul_path_0 "matmul_path" "<the matmul's key>" {
      %p = fork.knob "matmul" ["kernel", "split2", "split4", "vendor"] default "kernel"
    }
    fork.site @vendor_matmul_1 "vendor_matmul" "batch=1,m=16,...,T=bf16" {}   // no kernel
    %c = fork.alternatives @matmul_path_0 ["kernel", "split2", "split4", "vendor"] {
      %c1 = kernel.call @matmul_tc_0(%a, %b, %bias) : ...
      fork.yield %c1 : tensor<16x768xbf16>
    } {
      %p = kernel.call @matmul_tc_2(%a, %b) : (...) -> tensor<2x12288xf32>   // split=2
      %c2 = kernel.call @split_sum_3(%p, %bias) : (...) -> tensor<16x768xbf16>
      fork.yield %c2 : tensor<16x768xbf16>
    } { ... } {
      %acc = kernel.call @vendor_matmul_1(%a, %b) : (...) -> tensor<16x768xbf16>
      %c4 = kernel.call @elementwise_5(%acc, %bias) : (...) -> tensor<16x768xbf16>
      fork.yield %c4 : tensor<16x768xbf16>
    } : tensor<16x768xbf16>

Split-K is offered where the output has fewer tiles (64 x 64) than SPLIT_TILES and k is
MIN_K or more: one block per tile leaves most of a GPU's multiprocessors idle there, and
a split of k gives them work; each slice is at least MIN_SLICE deep. Matmuls inside
another choice's option (the unfused attention path) are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.base.problem_key import Chain, InputKind, KeyValue, ProblemKey
from emmy.dialects import fork, kernel
from emmy.dsl.keys import rename_chain, shift_chain
from emmy.families import matmul_path, vendor_matmul
from emmy.families.family import key_int
from emmy.passes.host_choices import inside_choice, offer_choice
from emmy.passes.site_table import SiteTable


def epilogue_chain(epilogue: Chain) -> Chain:
    """A matmul epilogue as an elementwise chain: the product is its first input, the
    epilogue's inputs the next ones."""
    return rename_chain(shift_chain(epilogue, 1), {"acc": "in0"})


def with_epilogue(
    sites: SiteTable,
    rewriter: PatternRewriter,
    call: kernel.CallOp,
    extra: Sequence[SSAValue],
    key: Mapping[str, KeyValue],
    size: int,
    cols: KeyValue,
) -> Region:
    """An option of a choice: the vendor library's `call`, then the key's epilogue (if
    any) as an elementwise kernel over its `size` elements (rows `cols` long) and the
    epilogue's `extra` inputs."""
    ops: list[Operation] = [call]
    value: SSAValue = call.outputs[0]
    if str(key["epilogue"]) != "acc":
        epilogue, inputs = key["epilogue"], key["inputs"]
        assert isinstance(epilogue, Chain) and isinstance(inputs, tuple), "a typed key"
        chain = {
            "n": size,
            "cols": cols,
            "T": key["T"],
            "inputs": (InputKind.FULL, *inputs),
            "fn": epilogue_chain(epilogue),
        }
        site = sites.library_site(rewriter, "elementwise", chain)
        epilogue = kernel.CallOp(site, [value, *extra], [value.type])
        ops.append(epilogue)
        value = epilogue.outputs[0]
    return Region(Block([*ops, fork.YieldOp([value])]))


@dataclass(frozen=True)
class OfferMatmulPaths(RewritePattern):
    """A call of a matmul site becomes the `kernel` option of a choice whose other options
    are its splits of k and the vendor library."""

    sites: SiteTable

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.CallOp, rewriter: PatternRewriter) -> None:
        matmul = self.sites.by_name.get(op.site.root_reference.data)
        if matmul is None or matmul.family.data not in matmul_path.MATMUL_FAMILIES:
            return
        if inside_choice(op):
            return  # an option of another choice (the unfused attention path) stays as it is
        key = matmul.key.data
        options = matmul_path.options_for(key)
        # the options' sites are made before the choice's, in the order of the options
        regions = [
            self.vendor_option(rewriter, op, key)
            if option == "vendor"
            else self.split_option(
                rewriter, op, matmul.family.data, key, int(option.removeprefix("split"))
            )
            for option in options[1:]
        ]
        site = self.sites.choice_site(
            rewriter, matmul_path.NAME, matmul_path.KNOB, matmul.key.data, options
        )
        offer_choice(rewriter, op, site, options, regions)

    def split_option(
        self,
        rewriter: PatternRewriter,
        call: kernel.CallOp,
        family_name: str,
        key: ProblemKey,
        split: int,
    ) -> Region:
        """The parts of the product by `split` blocks per tile, and their sum."""
        a, b, *extra = call.inputs
        (result,) = call.outputs
        size = key_int(key, "batch") * key_int(key, "m") * key_int(key, "n")
        parts_key = {**key, "epilogue": "acc", "inputs": (), "split": split}
        part_type = TensorType(Float32Type(), [split, size])
        parts_site = self.sites.library_site(rewriter, family_name, parts_key)
        parts = kernel.CallOp(parts_site, [a, b], [part_type])
        sum_key = {"split": split, "size": size, "n": key["n"], "T": key["T"]}
        sum_key |= {"epilogue": key["epilogue"], "inputs": key["inputs"]}
        sum_site = self.sites.library_site(rewriter, "split_sum", sum_key)
        total = kernel.CallOp(sum_site, [parts.outputs[0], *extra], [result.type])
        return Region(Block([parts, total, fork.YieldOp([total.outputs[0]])]))

    def vendor_option(
        self, rewriter: PatternRewriter, call: kernel.CallOp, key: ProblemKey
    ) -> Region:
        """The product by the vendor library, then the epilogue (if any) as an elementwise
        chain over it and the epilogue's inputs."""
        a, b, *extra = call.inputs
        (result,) = call.outputs
        vendor = self.sites.host_call_site(
            rewriter, vendor_matmul.NAME, vendor_matmul.vendor_key(key)
        )
        product = kernel.CallOp(vendor, [a, b], [result.type])
        size = key_int(key, "batch") * key_int(key, "m") * key_int(key, "n")
        return with_epilogue(self.sites, rewriter, product, extra, key, size, key["n"])
