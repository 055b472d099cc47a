"""Decode tokens/s with a static KV cache: `emmy generate`'s greedy loop over a recipe's
decode program (the prefill, then one token per step) beside torch on the same step module
and the same caches, measured in one run.

    .venv/bin/python benchmarks/decode.py [--device emu|cuda] [--models gpt2:tiny,llama:tiny]
        [--batch B] [--prompt-len P] [--tokens T]

Three columns: emmy, torch eager, and torch.compile of the step (its caches marked
static, as Hugging Face's StaticCache marks them, so that CUDA graphs take their in-place
writes). On emu (the default: the tiny configs, f32) emmy's figure is a regression figure,
not a speed claim, beside torch on the CPU (torch.compile with the aot_eager backend). On
cuda (default models: GPT-2 small and a Llama of 1B-parameter shapes, the recipes' `small`
and `1b` configs, bf16, batch 1) torch.compile is mode="reduce-overhead". Each line also says whether emmy's greedy tokens are
torch eager's (16-bit models may part ways after a near tie).

Decode tokens/s counts the steps after the prefill, over the batch; compiles are excluded
(emmy compiles the prefill and the step first; torch.compile's first pass is a warm-up).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

from emmy.decode import Generation, check_lengths, greedy, greedy_eager, prompt
from emmy.frontend.recipes import build_decoder, decode_case
from emmy.runtime.cuda import CudaDevice
from emmy.runtime.emu import EmuDevice

DEFAULT_MODELS = {"emu": "gpt2:tiny,llama:tiny", "cuda": "gpt2:small,llama:1b"}
#: torch.compile's settings in the comparison: reduce-overhead (Inductor and CUDA graphs) on
#: a GPU; on the emulator, whose figures say nothing, a backend that compiles in a blink
#: (Inductor's CPU compile takes tens of seconds), down the same code path
TORCH_COMPILE = {"cuda": {"mode": "reduce-overhead"}, "emu": {"backend": "aot_eager"}}


def compiled_torch(step: torch.nn.Module, ids, caches, count: int, **settings) -> Generation:
    """torch.compile of the step with `settings`: a warm-up pass compiles (and captures)
    the prefill and the step, a second pass on re-zeroed caches is timed."""
    for cache in caches:
        torch._dynamo.mark_static_address(cache)
    compiled = torch.compile(step, **settings)
    greedy_eager(compiled, ids, caches, count)
    for cache in caches:
        cache.zero_()
    return greedy_eager(compiled, ids, caches, count)


def measure(
    spec: str,
    device_name: str,
    batch: int,
    prompt_len: int,
    count: int,
    report: Callable[[str, float], None] | None = None,
) -> str:
    """One model's line: decode tokens/s of emmy, torch eager and torch.compile, and
    whether emmy's tokens are eager's; `report(column, tokens/s)` is told each column as
    it is measured (a caller cut short keeps those)."""
    told = report or (lambda column, figure: None)
    recipe, _, config = spec.partition(":")
    case = decode_case(recipe, config or None, None, batch)
    check_lengths(prompt_len, count, case.size["max_len"])
    device = CudaDevice() if device_name == "cuda" else EmuDevice()
    where = device.torch_device
    print(f"{case.describe()}: compiling and decoding", file=sys.stderr)
    # one model serves the three: each decodes on caches of its own
    _, step, caches = build_decoder(case, where)
    ids = prompt(batch, prompt_len, case.config["vocab"]).to(where)
    start = time.perf_counter()
    emmy = greedy(step, ids, caches, count, device, progress=lambda line: None)
    compile_s = time.perf_counter() - start - emmy.prefill_s - emmy.decode_s
    told("emmy", emmy.tokens_per_s())
    eager = greedy_eager(step, ids, [torch.zeros_like(c) for c in caches], count)
    told("torch eager", eager.tokens_per_s())
    columns = [f"emmy {emmy.tokens_per_s():.1f}", f"torch eager {eager.tokens_per_s():.1f}"]
    settings = TORCH_COMPILE[device_name]
    graphs = compiled_torch(step, ids, [torch.zeros_like(c) for c in caches], count, **settings)
    label = f"torch.compile {'/'.join(settings.values())}"
    told(label, graphs.tokens_per_s())
    columns.append(f"{label} {graphs.tokens_per_s():.1f}")
    same = torch.equal(emmy.tokens.cpu(), eager.tokens.cpu())
    return (
        f"{case.describe()} on {device.identity}: decode tokens/s {', '.join(columns)} "
        f"({emmy.steps} steps; emmy's prefill {emmy.prefill_s * 1000:.1f} ms, compiles "
        f"{compile_s:.1f} s; tokens equal eager's: {'yes' if same else 'no'})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["emu", "cuda"], default="emu")
    parser.add_argument(
        "--models",
        help="RECIPE:CONFIG, comma-separated (default: gpt2:tiny,llama:tiny on emu, "
        "gpt2:small,llama:1b on cuda)",
    )
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per decode (default: 32)")
    args = parser.parse_args()
    models = (args.models or DEFAULT_MODELS[args.device]).split(",")
    for spec in models:
        print(measure(spec, args.device, args.batch, args.prompt_len, args.tokens), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
