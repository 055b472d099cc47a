"""A convolution's paths (offer-paths, after lower-sites): each convolution becomes an
`alternatives` fork between its kernel (conv or conv_tc, the epilogue fused) and the vendor
library (cuDNN through torch on a GPU, the CPU's convolution on the emulator), the epilogue
then an elementwise kernel of its own. The `conv` knob of a `conv_path` site decides, like
any fork; on a GPU with no evidence, the target default takes the vendor library, as it does
for a matmul.

    %y = kernel.call @conv_tc_0(%x, %w, %b, %r) : (...) -> tensor<2x64x28x28xbf16>
  →
    fork.site @conv_path_1 "conv_path" "<the convolution's key>" {
      %p = fork.knob "conv" ["kernel", "vendor"] default "kernel"
    }
    fork.site host_call @vendor_conv_2 "vendor_conv" "batch=2,cin=64,...,T=bf16" {}
    %y = fork.alternatives @conv_path_1 ["kernel", "vendor"] {
      %y1 = kernel.call @conv_tc_0(%x, %w, %b, %r) : ...
      fork.yield %y1 : tensor<2x64x28x28xbf16>
    } {
      %c = kernel.call @vendor_conv_2(%x, %w, %b) : (...) -> tensor<2x64x28x28xbf16>
      %y2 = kernel.call @elementwise_3(%c, %r) : (...) -> tensor<2x64x28x28xbf16>
      fork.yield %y2 : tensor<2x64x28x28xbf16>
    } : tensor<2x64x28x28xbf16>

A weight gradient's call (conv_weight) is offered the same way, as a `conv_weight_path`
choice (knob `conv_weight`) whose other options are its splits of the depth (conv_weight's
f32 parts, then split_sum, as a matmul's split-K) where few tiles meet a deep sum, and the
vendor library's weight gradient (`vendor_conv_weight`); none has an epilogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Block, Region
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.base.problem_key import Chain, KeyValue, ProblemKey
from emmy.dialects import fork, kernel
from emmy.dsl.library import declaration
from emmy.families import (
    conv_path,
    conv_weight,
    conv_weight_path,
    vendor_conv,
    vendor_conv_weight,
)
from emmy.families.family import key_int
from emmy.passes.host_choices import inside_choice, offer_choice
from emmy.passes.matmul_paths import with_epilogue
from emmy.passes.site_table import SiteTable


@dataclass(frozen=True)
class OfferConvPaths(RewritePattern):
    """A call of a convolution site becomes the `kernel` option of a choice whose other
    option is the vendor library."""

    sites: SiteTable

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.CallOp, rewriter: PatternRewriter) -> None:
        conv = self.sites.by_name.get(op.site.root_reference.data)
        if conv is None or inside_choice(op):
            return
        if conv.family.data == conv_weight.FAMILY.name:
            self.offer_weight_paths(rewriter, op, conv.key.data)
            return
        if conv.family.data not in conv_path.CONV_FAMILIES:
            return
        vendor = self.vendor_option(rewriter, op, self.typed_key(conv.family.data, conv.key.data))
        site = self.sites.choice_site(
            rewriter, conv_path.NAME, conv_path.KNOB, conv.key.data, conv_path.OPTIONS
        )
        offer_choice(rewriter, op, site, conv_path.OPTIONS, [vendor])

    @staticmethod
    def typed_key(family_name: str, key: ProblemKey) -> dict[str, KeyValue]:
        """The key with the names its text leaves out at their declared defaults (a stride
        of 1), typed as the key's own values are."""
        defaults = ProblemKey.of(declaration(family_name).key_defaults.items())
        return {**defaults, **key}

    def offer_weight_paths(
        self, rewriter: PatternRewriter, call: kernel.CallOp, key: ProblemKey
    ) -> None:
        """A weight gradient's choice: its kernel, its splits of the depth, the vendor's."""
        typed = self.typed_key(conv_weight.FAMILY.name, key)
        options = conv_weight_path.options_for(typed)
        # the options' sites are made before the choice's, in the order of the options
        regions = [
            self.weight_vendor_option(rewriter, call, typed)
            if option == "vendor"
            else self.weight_split_option(rewriter, call, typed, int(option.removeprefix("split")))
            for option in options[1:]
        ]
        site = self.sites.choice_site(
            rewriter, conv_weight_path.NAME, conv_weight_path.KNOB, key, options
        )
        offer_choice(rewriter, call, site, options, regions)

    def weight_split_option(
        self,
        rewriter: PatternRewriter,
        call: kernel.CallOp,
        key: Mapping[str, KeyValue],
        split: int,
    ) -> Region:
        """The weight gradient's parts by `split` blocks per tile, and their sum."""
        (result,) = call.outputs
        size = key_int(key, "cout") * key_int(key, "kdim")
        parts_site = self.sites.library_site(
            rewriter, conv_weight.FAMILY.name, {**key, "split": split}
        )
        parts = kernel.CallOp(
            parts_site, list(call.inputs), [TensorType(Float32Type(), [split, size])]
        )
        sum_key = {"split": split, "size": size, "n": key["kdim"], "T": key["T"]}
        sum_key |= {"epilogue": Chain("acc"), "inputs": ()}
        sum_site = self.sites.library_site(rewriter, "split_sum", sum_key)
        total = kernel.CallOp(sum_site, [parts.outputs[0]], [result.type])
        return Region(Block([parts, total, fork.YieldOp([total.outputs[0]])]))

    def weight_vendor_option(
        self, rewriter: PatternRewriter, call: kernel.CallOp, key: Mapping[str, KeyValue]
    ) -> Region:
        """The weight gradient by the vendor library."""
        (result,) = call.outputs
        vendor_key = vendor_conv_weight.vendor_key(key)
        site = self.sites.host_call_site(rewriter, vendor_conv_weight.NAME, vendor_key)
        gradient = kernel.CallOp(site, list(call.inputs), [result.type])
        return Region(Block([gradient, fork.YieldOp([gradient.outputs[0]])]))

    def vendor_option(
        self, rewriter: PatternRewriter, call: kernel.CallOp, key: Mapping[str, KeyValue]
    ) -> Region:
        """The convolution (and its bias) by the vendor library, then the epilogue (if any)
        as an elementwise chain over it and the epilogue's inputs."""
        params = 3 if key_int(key, "has_bias") else 2
        inputs, extra = call.inputs[:params], call.inputs[params:]
        (result,) = call.outputs
        site = self.sites.host_call_site(rewriter, vendor_conv.NAME, vendor_conv.vendor_key(key))
        convolution = kernel.CallOp(site, list(inputs), [result.type])
        size = key_int(key, "batch") * key_int(key, "cout") * key_int(key, "spatial")
        return with_epilogue(self.sites, rewriter, convolution, extra, key, size, key["ow"])
