"""The IR is verified after every pass of the compile pipeline, dominance included (xDSL's
`verify()` checks each op, not that a value is defined before its uses): a pass that
leaves it invalid is named. And the pass that did, once: fuse-graph on a parallel
residual (GPT-NeoX), whose fused norm wrote the block's input after a read of it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn
from xdsl.dialects import func
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

import emmy
import emmy.api
from emmy import compiler
from emmy.base.compile_options import CompileOptions
from emmy.base.errors import EmmyError
from emmy.base.identity import EMU
from emmy.build import recipe_program
from emmy.frontend.cache import parse_graph
from emmy.frontend.recipes import config_names, recipe_names
from emmy.passes.fuse_graph import FuseGraph
from emmy.passes.verify import InvalidIR, first_undominated_use, verify_dominance
from emmy.runtime.convert import MODEL_TOLERANCES
from emmy.runtime.emu import EmuDevice

TEXT = """
func.func @main(%x : tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = graph.exp %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %n = graph.softmax %e {dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %y = graph.mul %n, %e : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""


@dataclass(frozen=True)
class MoveAfterUser(ModulePass):
    """A broken pass: moves @main's first op that has a user to just after that user."""

    name = "move-after-user"

    def apply(self, ctx, op) -> None:
        main = next(o for o in op.ops if isinstance(o, func.FuncOp))
        for moved in main.body.block.ops:
            users = [use.operation for r in moved.results for use in r.uses]
            if users:
                moved.detach()
                Rewriter.insert_op(moved, InsertPoint.after(users[0]))
                return


def with_pass_after(monkeypatch, before: type[ModulePass], planted: type[ModulePass]) -> None:
    pipeline = list(compiler.COMPILE_PIPELINE)
    pipeline.insert(pipeline.index(before) + 1, planted)
    monkeypatch.setattr(compiler, "COMPILE_PIPELINE", tuple(pipeline))


@pytest.mark.parametrize("env", ["1", ""])
def test_a_pass_that_breaks_dominance_is_named(monkeypatch, env: str) -> None:
    """In full (EMMY_VERIFY_EACH=1) and by default (dominance after each pass),
    the compile stops at the pass that moved an op after its user, in one line."""
    monkeypatch.setenv("EMMY_VERIFY_EACH", env)
    with_pass_after(monkeypatch, FuseGraph, MoveAfterUser)
    with pytest.raises(EmmyError) as caught:
        compiler.compile_graph(
            parse_graph(TEXT, "<test>"), CompileOptions(db=None), compile_kernels=False
        )
    message = str(caught.value)
    assert message.startswith("the IR is invalid after pass move-after-user: value %")
    assert "before it is defined" in message
    assert "\n" not in message


def test_verification_after_the_last_pass_alone_is_on_request(monkeypatch) -> None:
    """EMMY_VERIFY_EACH=0 verifies once, after the last pass: the same broken pass is
    found there, unnamed (what the cost of verifying each pass is measured against)."""
    monkeypatch.setenv("EMMY_VERIFY_EACH", "0")
    assert compiler.verify_mode() == "last"
    with_pass_after(monkeypatch, FuseGraph, MoveAfterUser)
    with pytest.raises(EmmyError, match="the IR is invalid after the passes: value %"):
        compiler.compile_graph(
            parse_graph(TEXT, "<test>"), CompileOptions(db=None), compile_kernels=False
        )


def test_the_verify_modes() -> None:
    assert compiler.verify_mode(True) == "full"
    assert compiler.verify_mode(False) == "last"


def test_dominance_sees_enclosing_blocks_and_not_into_isolated_regions() -> None:
    """A value defined above a region is visible in it; a function (isolated from above)
    sees none of another's values, and a value is not visible after the block that
    defines it."""
    module = parse_graph(TEXT, "<test>")
    assert first_undominated_use(module) is None
    verify_dominance(module)
    main = next(o for o in module.ops if isinstance(o, func.FuncOp))
    ops = list(main.body.block.ops)
    ops[0].detach()
    main.body.block.add_op(ops[0])  # the exp after everything, the return included
    value, user = first_undominated_use(module)
    assert value is ops[0].results[0] and user is ops[1]
    with pytest.raises(InvalidIR, match="is used by graph.softmax before it is defined"):
        verify_dominance(module)


# -- the parallel residual (GPT-NeoX) ----------------------------------------------------


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max() / expected.abs().max())


class ParallelResidual(nn.Module):
    """x + attention(ln1(x)) + mlp(ln2(x)), the block's input x itself a sum: the pattern
    of GPT-NeoX's parallel residual (linears over [batch, seq, dim], as AOTAutograd
    decomposes them: a reshape between each product and its bias)."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn, self.mlp = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        h = x + r
        return h + self.attn(self.ln1(h)) + self.mlp(self.ln2(h))


def compile_strictly(model: nn.Module, *inputs: torch.Tensor) -> tuple[torch.Tensor, list]:
    """`model(*inputs)` through torch.compile with emmy's backend on the emulator, every
    graph compiled (one that fails raises, not runs eagerly), and its programs."""
    torch._dynamo.reset()
    programs: list = []
    backend = emmy.api.backend(
        device=EmuDevice(), strict=True, programs=programs, db="none", use_cache=False
    )
    with torch.no_grad():
        return torch.compile(model, backend=backend)(*inputs), programs


def assert_matches_eager(model: nn.Module, *inputs: torch.Tensor) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    actual, programs = compile_strictly(model, *inputs)
    assert programs
    assert all(not p.fallbacks for p in programs), [p.fallbacks for p in programs]
    error = relative_error(actual, expected)
    assert error <= MODEL_TOLERANCES[torch.float32][0], f"relative error {error:.3g}"


def test_a_parallel_residual_matches_eager() -> None:
    torch.manual_seed(0)
    model = ParallelResidual().eval()
    assert_matches_eager(model, torch.randn(2, 8, 64), torch.randn(2, 8, 64))


class LogitsWithoutCache(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def test_a_tiny_gpt_neox_matches_eager_with_no_fallback() -> None:
    """GPTNeoXConfig's defaults (a parallel residual) at 2 layers of hidden 64: through
    torch.compile, whose graph once failed in host_plan (a fused kernel's second output
    used before the kernel), and through emmy.compile."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPTNeoXConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=128,
    )
    assert config.use_parallel_residual
    torch.manual_seed(0)
    model = LogitsWithoutCache(transformers.AutoModelForCausalLM.from_config(config).eval())
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(0))
    assert_matches_eager(model, ids)
    compiled = emmy.compile(model, ids, device=EmuDevice(), db="none", use_cache=False)
    assert not compiled.program.fallbacks
    with torch.no_grad():
        error = relative_error(compiled(ids), model(ids))
    assert error <= MODEL_TOLERANCES[torch.float32][0], f"relative error {error:.3g}"


# the GPU targets share their passes' paths (vendor calls, tensor cores): one stands for both
@pytest.mark.parametrize("target", ["nvidia-h200-sm90", EMU])
def test_every_recipe_verifies_in_full_after_every_pass(monkeypatch, target: str) -> None:
    """The suite compiles as users do (dominance after each pass, the op verifiers after
    the last); here every recipe, on each target, is verified in full after each pass, so
    that a pass leaving an op invalid for a later one to remove is named. One config a
    recipe: its others are the same graph at other sizes. (The tiny vision models are
    verified so in tests/test_vision_models.py, as they compile there.)"""
    monkeypatch.setenv("EMMY_VERIFY_EACH", "1")
    for recipe in recipe_names():
        assert recipe_program(recipe, config_names(recipe)[0], 0, target).kernels
