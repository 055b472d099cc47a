"""Every pass of emmy by name, and the compile pipeline: emmy-opt registers these, and a
compile runs COMPILE_PIPELINE in order, spelled as text (`compile_pipeline`) that emmy-opt
runs alike:

    emmy-opt graph.mlir -p 'recognise-attention,...,resolve-forks{pin="vec=4" target="emu" ...},...'
"""

from __future__ import annotations

from xdsl.passes import ModulePass

from emmy.passes.fuse_graph import FuseGraph
from emmy.passes.inline_host_paths import InlineHostPaths
from emmy.passes.lower_graph import LowerGraph, LowerSites
from emmy.passes.merge_reshapes import MergeReshapes
from emmy.passes.offer_paths import OfferPaths
from emmy.passes.plan_host import PlanHost
from emmy.passes.recognise_attention import RecogniseAttention
from emmy.passes.resolve_forks import ResolveForks
from emmy.passes.specialize_forks import SpecializeForks

#: emmy.graph → sites → resolved forks → the launch plan; a compile configures resolve-forks
#: and plan-host
COMPILE_PIPELINE: tuple[type[ModulePass], ...] = (
    RecogniseAttention,
    OfferPaths,  # an attention's paths: graph ops
    MergeReshapes,
    FuseGraph,
    LowerSites,
    OfferPaths,  # a matmul's, a convolution's and a decode attention's: kernel calls
    ResolveForks,
    SpecializeForks,
    InlineHostPaths,
    PlanHost,
)

PASSES: dict[str, type[ModulePass]] = {
    emmy_pass.name: emmy_pass for emmy_pass in (*COMPILE_PIPELINE, LowerGraph)
}


def compile_pipeline(
    *configured: ModulePass, passes: tuple[type[ModulePass], ...] = COMPILE_PIPELINE
) -> str:
    """The passes as a pipeline's text (`emmy-opt -p` takes it), those `configured` with
    their options (a compile's: ResolveForks.of(options), PlanHost(constants))."""
    given = {p.name: p for p in configured}
    return ",".join(str(given[p.name].spec()) if p.name in given else p.name for p in passes)
