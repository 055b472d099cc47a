"""split-k: offers each matmul with few output tiles and a deep k as an `alternatives` fork
between the one kernel and split-K: `split` blocks per tile, each summing a k-slice into
f32 parts, then a split_sum kernel that adds the parts and applies the epilogue. The
`split_k` knob of a `matmul_split` site decides, like any fork.

    %c = kernel.call @matmul_tc_0(%a, %b, %bias) : (...) -> tensor<16x768xbf16>
  →
    fork.site @matmul_split_0 "matmul_split" "<the matmul's key>" {
      %s = fork.knob "split_k" [1, 2, 4, 8] default 1     // the splits this key is offered
    }
    %c = fork.alternatives @matmul_split_0 ["1", "2", "4", "8"] {
      %c1 = kernel.call @matmul_tc_0(%a, %b, %bias) : ...
      fork.yield %c1 : tensor<16x768xbf16>
    } {
      %p = kernel.call @matmul_tc_1(%a, %b) : (...) -> tensor<2x12288xf32>   // split=2
      %c2 = kernel.call @split_sum_2(%p, %bias) : (...) -> tensor<16x768xbf16>
      fork.yield %c2 : tensor<16x768xbf16>
    } ...

Only matmuls with fewer output tiles (64 x 64) than SPLIT_TILES and k of MIN_K or more get
the fork: those leave most of a GPU's multiprocessors idle with one block per tile, and a
split of k gives them work. Each slice is at least MIN_SLICE deep. Matmuls inside another
choice's option (the unfused attention path) are left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass

from emmy.dialects import fork, kernel
from emmy.dsl.keys import parse_key
from emmy.dsl.library import canonical_key, family, instantiate

FAMILY = "matmul_split"
KNOB = "split_k"
SPLITS = (1, 2, 4, 8)
MATMUL_FAMILIES = ("matmul", "matmul_tc")
SPLIT_TILES = 128
MIN_K = 512
MIN_SLICE = 256


def splits_for(key: dict) -> list[int]:
    """The splits offered to a matmul key: [1] alone where split-K is not worth a fork."""
    tiles = int(key["batch"]) * math.ceil(int(key["m"]) / 64) * math.ceil(int(key["n"]) / 64)
    k = int(key["k"])
    if tiles >= SPLIT_TILES or k < MIN_K:
        return [1]
    return [s for s in SPLITS if k >= s * MIN_SLICE]


@dataclass(frozen=True)
class SplitK(ModulePass):
    name = "split-k"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sites = {s.sym_name.data: s for s in op.ops if isinstance(s, fork.SiteOp)}
        made: dict[tuple[str, str], str] = {}  # (family, key) -> site name

        def site_of(family_name: str, key: dict) -> str:
            decl = family(family_name)
            identity = (family_name, canonical_key(decl, key))
            if identity not in made:
                name = f"{family_name}_{len(sites)}"
                sites[name] = instantiate(decl, key, name)
                made[identity] = name
                op.body.block.insert_op_before(sites[name], first_function)
            return made[identity]

        calls = [c for c in op.walk() if isinstance(c, kernel.CallOp)]
        first_function = next(o for o in op.ops if not isinstance(o, fork.SiteOp))
        for call in calls:
            matmul = sites.get(call.site.root_reference.data)
            if matmul is None or matmul.family.data not in MATMUL_FAMILIES:
                continue
            if _inside_choice(call):
                continue
            key = parse_key(matmul.key.data)
            splits = splits_for(key)
            if len(splits) < 2:
                continue
            choice_site = made.get((FAMILY, matmul.key.data))
            if choice_site is None:
                choice_site = f"{FAMILY}_{len(sites)}"
                site = fork.SiteOp(choice_site, FAMILY, matmul.key.data)
                site.body.block.add_op(fork.KnobOp(KNOB, splits, 1))
                sites[choice_site] = site
                made[(FAMILY, matmul.key.data)] = choice_site
                op.body.block.insert_op_before(site, first_function)
            options = [Region(Block())]
            for split in splits[1:]:
                options.append(self.split_option(call, matmul.family.data, key, split, site_of))
            (result,) = call.outputs
            choice = fork.AlternativesOp(
                choice_site, [str(s) for s in splits], options, [result.type]
            )
            block = call.parent_block()
            assert block is not None
            block.insert_op_before(choice, call)
            result.replace_all_uses_with(choice.outputs[0])
            call.detach()
            whole = choice.branches[0].block
            whole.add_op(call)
            whole.add_op(fork.YieldOp([call.outputs[0]]))

    @staticmethod
    def split_option(call: kernel.CallOp, family_name: str, key: dict, split: int, site_of):
        """The parts of the product by a split of `split` blocks per tile, and their sum."""
        a, b, *extra = call.inputs
        (result,) = call.outputs
        size = int(key["batch"]) * int(key["m"]) * int(key["n"])
        parts_key = {**key, "epilogue": "acc", "inputs": "", "split": split}
        parts = kernel.CallOp(
            site_of(family_name, parts_key), [a, b], [TensorType(Float32Type(), [split, size])]
        )
        sum_key = {
            "split": split,
            "size": size,
            "n": key["n"],
            "T": key["T"],
            "epilogue": key["epilogue"],
            "inputs": key["inputs"],
        }
        total = kernel.CallOp(
            site_of("split_sum", sum_key), [parts.outputs[0], *extra], [result.type]
        )
        return Region(Block([parts, total, fork.YieldOp([total.outputs[0]])]))


def _inside_choice(call: kernel.CallOp) -> bool:
    parent = call.parent_op()
    while parent is not None:
        if isinstance(parent, fork.AlternativesOp):
            return True
        parent = parent.parent_op()
    return False
