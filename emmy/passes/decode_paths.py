"""A decode attention's paths (offer-paths, after lower-sites): each decode attention (a call
of an attention_decode site) becomes an `alternatives` fork between its one-pass kernel and
split-KV ("flash-decoding"): `splits` blocks per query, each reading one chunk of the cache
and writing its part (the chunk's normalised output and log-sum-exp), then
attention_decode_combine adding the parts up. The `path` knob of an `attention_decode_path`
site decides, like any fork.

    %o = kernel.call @attention_decode_0(%q, %k, %v, %len) : (...) -> tensor<1x4x1x64xf32>
  →
    fork.site choice @attention_decode_path_3 "attention_decode_path" "<the decode key>" {
      %p = fork.knob "path" ["one_pass", "split4", "split16"] default "split16"
    }
    %o = fork.alternatives @attention_decode_path_3 ["one_pass", "split4", "split16"] {
      %a = kernel.call @attention_decode_0(%q, %k, %v, %len) : ...
      fork.yield %a : tensor<1x4x1x64xf32>
    } {
      %part, %lse = kernel.call @attention_decode_1(%q, %k, %v, %len)     // splits=4
          : (...) -> (tensor<4x1x4x1x64xf32>, tensor<4x1x4x1xf32>)
      %b = kernel.call @attention_decode_combine_2(%part, %lse) : ... -> tensor<1x4x1x64xf32>
      fork.yield %b : tensor<1x4x1x64xf32>
    } { ... } : tensor<1x4x1x64xf32>

The one pass has a block per `queries` queries (batch · heads · new of them), each reading
the whole visible cache: with few queries (a small batch decoding) most of a GPU's
multiprocessors idle while a long cache streams through a few. Split-KV is offered where
the queries are fewer than SM_COUNT and the cache holds MIN_CHUNK positions per chunk or
more; each option is `split<s>` for s in SPLITS with chunks of MIN_CHUNK or more.

The declared default (what the oracle stack takes with no measurements) is split-KV where
the queries are far fewer than the multiprocessors (queries · 4 ≤ SM_COUNT) and the cache
long (LONG_CACHE or more): the fewest splits giving 2 · SM_COUNT (query, chunk) pairs or
more, else the most offered; the one pass everywhere else. SM_COUNT is an H200's.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Block, Region
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.base.problem_key import ProblemKey
from emmy.dialects import fork, kernel
from emmy.families import attention_decode_path
from emmy.families.family import key_int
from emmy.passes.host_choices import inside_choice, offer_choice
from emmy.passes.site_table import SiteTable


@dataclass(frozen=True)
class OfferSplitKV(RewritePattern):
    """A call of an attention_decode site becomes the `one_pass` option of a choice whose
    other options split the cache."""

    sites: SiteTable

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: kernel.CallOp, rewriter: PatternRewriter) -> None:
        decode = self.sites.by_name.get(op.site.root_reference.data)
        if (
            decode is None
            or decode.family.data != attention_decode_path.DECODE_FAMILY
            or inside_choice(op)
        ):
            return
        key = decode.key.data
        options = attention_decode_path.options_for(key)
        if len(options) == 1:
            return  # nothing to choose
        regions = [
            self.split_option(rewriter, op, key, int(option.removeprefix("split")))
            for option in options[1:]
        ]
        site = self.sites.choice_site(
            rewriter,
            attention_decode_path.NAME,
            attention_decode_path.KNOB,
            key,
            options,
            default=attention_decode_path.default_for(key),
        )
        offer_choice(rewriter, op, site, options, regions)

    def split_option(
        self, rewriter: PatternRewriter, call: kernel.CallOp, key: ProblemKey, splits: int
    ) -> Region:
        """The chunks' parts by `splits` blocks per query, and their combination."""
        (result,) = call.outputs
        batch, heads, new, dim = (key_int(key, n) for n in ("batch", "heads", "new", "dim"))
        part_type = TensorType(Float32Type(), [splits, batch, heads, new, dim])
        lse_type = TensorType(Float32Type(), [splits, batch, heads, new])
        parts_site = self.sites.library_site(
            rewriter, attention_decode_path.DECODE_FAMILY, {**key, "splits": splits}
        )
        parts = kernel.CallOp(parts_site, list(call.inputs), [part_type, lse_type])
        combine_key = {
            "splits": splits,
            "rows": attention_decode_path.queries_of(key),
            "dim": dim,
            "T": key["T"],
        }
        combine_site = self.sites.library_site(
            rewriter, attention_decode_path.COMBINE_FAMILY, combine_key
        )
        total = kernel.CallOp(combine_site, list(parts.outputs), [result.type])
        return Region(Block([parts, total, fork.YieldOp([total.outputs[0]])]))
