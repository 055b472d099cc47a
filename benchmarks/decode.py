"""Decode tokens/s with a static KV cache: `emmy generate`'s greedy loop over a recipe's
decode program (the prefill, then one token per step) beside torch on the same step module
and the same caches, measured in one run.

    .venv/bin/python benchmarks/decode.py [--device emu|cuda] [--models gpt2:tiny,llama:tiny]
        [--batch B] [--prompt-len P] [--tokens T]

On emu (the default: the tiny configs, f32) emmy's figure is a regression figure, not a
speed claim; torch eager on the CPU is printed beside it. On cuda (default models: GPT-2
small and a Llama of 1B-parameter shapes, the recipes' `small` and `1b` configs, bf16,
batch 1) three columns: emmy, torch eager, and torch.compile(mode="reduce-overhead") of the
step (its caches marked static, as Hugging Face's StaticCache marks them, so that its CUDA
graphs take their in-place writes). Each line also says whether emmy's greedy tokens are
torch eager's (16-bit models may part ways after a near tie).

Decode tokens/s counts the steps after the prefill, over the batch; compiles are excluded
(emmy compiles the prefill and the step first; torch.compile's first pass is a warm-up).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from emmy.decode import Generation, check_lengths, greedy, greedy_eager, prompt
from emmy.frontend.recipes import build_decoder, decode_case
from emmy.runtime.cuda import CudaDevice
from emmy.runtime.emu import EmuDevice

DEFAULT_MODELS = {"emu": "gpt2:tiny,llama:tiny", "cuda": "gpt2:small,llama:1b"}


def compiled_torch(step: torch.nn.Module, ids, caches, count: int) -> Generation:
    """torch.compile(mode="reduce-overhead") of the step: a warm-up pass compiles (and
    captures) the prefill and the step, a second pass on re-zeroed caches is timed."""
    for cache in caches:
        torch._dynamo.mark_static_address(cache)
    compiled = torch.compile(step, mode="reduce-overhead")
    greedy_eager(compiled, ids, caches, count)
    for cache in caches:
        cache.zero_()
    return greedy_eager(compiled, ids, caches, count)


def measure(spec: str, device_name: str, batch: int, prompt_len: int, count: int) -> str:
    recipe, _, config = spec.partition(":")
    case = decode_case(recipe, config or None, None, batch)
    check_lengths(prompt_len, count, case.size["max_len"])
    where = "cuda" if device_name == "cuda" else "cpu"
    device = CudaDevice() if device_name == "cuda" else EmuDevice()
    print(f"{case.describe()}: compiling and decoding", file=sys.stderr)
    # one model serves the three: each decodes on caches of its own
    _, step, caches = build_decoder(case, where)
    ids = prompt(batch, prompt_len, case.config["vocab"]).to(where)
    start = time.perf_counter()
    emmy = greedy(step, ids, caches, count, device, progress=lambda line: None)
    compile_s = time.perf_counter() - start - emmy.prefill_s - emmy.decode_s
    eager = greedy_eager(step, ids, [torch.zeros_like(c) for c in caches], count)
    columns = [f"emmy {emmy.tokens_per_s():.1f}", f"torch eager {eager.tokens_per_s():.1f}"]
    if device_name == "cuda":
        graphs = compiled_torch(step, ids, [torch.zeros_like(c) for c in caches], count)
        columns.append(f"torch.compile reduce-overhead {graphs.tokens_per_s():.1f}")
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
