"""The parts of a loop: a bench campaign of a few sites, decode tokens/s, and a GPT-2 training
step beside Inductor."""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import emmy.api
from gpucheck.context import Context, WrongResult, call_seconds
from gpucheck.model_parts import TORCH_COMPILE_BACKEND
from gpucheck.process_parts import _subprocess_part

#: the campaign part's sites: a softmax and a tensor-core matmul, with its path choice
CAMPAIGN_EXPRESSION = (
    "torch.softmax(torch.randn(4096, 4096, dtype=torch.bfloat16), -1)"
    " @ torch.randn(4096, 1024, dtype=torch.bfloat16)"
)


def campaign_part(ctx: Context) -> None:
    """`emmy campaign run` of a few sites on this GPU through a local Ray with no emulator
    workers: a GPU worker benches them, and the summary says how fast."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("ray") is None:
        ctx.note("campaign: Ray is not installed (pip install -e '.[campaign]'): not run")
        return
    emmy = str(Path(sys.executable).with_name("emmy"))
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-campaign-"))
    plan = [emmy, "campaign", "plan", "-c", CAMPAIGN_EXPRESSION, "--configs", "sample=4",
            "--max-rows", "4", "--devices", ctx.device.identity, "-o", str(folder / "c.json")]  # fmt: skip
    subprocess.run(plan, check=True, capture_output=True, text=True, timeout=120)
    run = [emmy, "campaign", "run", str(folder / "c.json"), "--workers", "0",
           "--worker-db", str(folder / "workers.db")]  # fmt: skip
    _subprocess_part(ctx, run)


def decode_part(ctx: Context) -> None:
    """benchmarks/decode.py's measure in this part's process, one line per model: decode
    tokens/s of emmy, torch eager and torch.compile (reduce-overhead on cuda), each figure
    streamed as it is measured, and whether emmy's tokens are eager's (--decode-tokens T:
    a prompt of T, then T tokens)."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "decode.py"
    measure = runpy.run_path(str(script), run_name="decode_benchmark")["measure"]
    tokens = ctx.options.get("decode_tokens") or 128
    for spec in ctx.options["decode"].split(","):

        def report(column: str, figure: float, spec: str = spec) -> None:
            ctx.emit((spec, "tokens_s", column), figure)

        line = ctx.attempt(spec, measure, spec, ctx.device_name, 1, tokens, tokens, report)
        ctx.emit((spec, "ok"), line is not None)
        ctx.emit((spec, "line"), line)
        print(f"  {line}", flush=True)


def training_step(config: str, torch_device: str) -> tuple[object, torch.Tensor, Callable]:
    """The training step's GPT-2 recipe case at `config`, its input ids and the step's loss
    (the model in train mode on `torch_device`, cross-entropy over its logits): what
    training_part times and gpu-day's prepare compiles ahead."""
    import torch.nn.functional as F

    from emmy.frontend.recipes import build, resolve_case

    case = resolve_case("gpt2", config, 0, None)
    model, inputs = build(case)
    model = model.to(torch_device).train()

    def loss_of(ids: torch.Tensor) -> torch.Tensor:
        logits = model(ids)
        return F.cross_entropy(logits.flatten(0, -2).float(), ids.flatten())

    return case, inputs[0], loss_of


def training_part(ctx: Context) -> None:
    """A GPT-2 training step (forward, cross-entropy, backward) in tokens/s, the recipe's
    --training CONFIG (small on a GPU), the model in train mode and its inputs on the
    device: torch eager first, then torch.compile with emmy's backend (strict: every
    graph in emmy's kernels or the step fails) and with torch's (Inductor on a GPU), their
    compile times beside; each compiled step's loss checked against eager's first."""
    config = ctx.options["training"]
    case, ids, loss_of = training_step(config, ctx.device.torch_device)
    ids = ctx.on_device(ids)
    tokens = math.prod(ids.shape)
    ctx.emit(("case",), {"config": config, **case.size, "dtype": case.dtype})
    expected = loss_of(ids).detach()

    def measure(label: str, step_loss: Callable, launches: bool) -> None:
        start = time.perf_counter()
        loss = step_loss(ids)
        loss.backward()
        if label != "torch eager":
            ctx.emit((label, "compile_s"), time.perf_counter() - start)
        if not torch.allclose(loss.detach().float(), expected.float(), rtol=2e-2, atol=2e-2):
            raise WrongResult(f"loss {loss.item():.5f}, eager's {expected.item():.5f}")
        seconds = call_seconds(ctx, label, lambda: step_loss(ids).backward(), launches)
        ctx.emit((label, "tokens_s"), tokens / seconds)
        print(
            f"  gpt2 {config} training step {label:22} {tokens / seconds:12.0f} tokens/s",
            flush=True,
        )

    ctx.attempt("torch eager", measure, "torch eager", loss_of, False)
    torch._dynamo.reset()
    backend = emmy.api.backend(device=ctx.device, strict=True)
    ctx.attempt("emmy", measure, "emmy", torch.compile(loss_of, backend=backend), True)
    torch_backend = TORCH_COMPILE_BACKEND.get(ctx.device_name)
    if torch_backend is None:  # gpu-day's compile-only device
        return
    torch._dynamo.reset()
    compiled = torch.compile(loss_of, backend=torch_backend)
    ctx.attempt("torch.compile", measure, "torch.compile", compiled, False)
