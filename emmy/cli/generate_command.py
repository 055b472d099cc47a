"""`emmy generate`: greedy decoding of a recipe's model with a static KV cache, or of a
Hugging Face causal LM's directory through torch.compile with emmy's backend."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emmy.base.dtypes import FLOAT_NAMES
from emmy.base.errors import EmmyError
from emmy.cli.sources import make_device, run_config
from emmy.frontend import hf
from emmy.frontend.recipes import (
    build_decoder,
    decode_case,
)


def add_generate_command(commands: argparse._SubParsersAction) -> None:
    generate_cmd = commands.add_parser(
        "generate",
        help="greedy decoding of a recipe's model with a static KV cache",
        description="Compile a recipe's decode program (gpt2, llama) twice, the prefill of "
        "a random prompt (seeded) and the one-token step, and decode greedily: the caches, "
        "one key and one value tensor per layer at the recipe's max_len, are written in "
        "place. Prints the tokens of each batch row, the prefill's time and the decode "
        "tokens/s; --check compares the tokens with torch eager's, token for token.",
    )
    generate_cmd.add_argument(
        "recipe",
        metavar="RECIPE|DIR",
        help="a recipe with a decode program (gpt2, llama), or a Hugging Face causal LM's "
        "directory: its generate() with a static cache, its forward compiled by "
        "torch.compile with emmy's backend",
    )
    generate_cmd.add_argument(
        "--prompt-len", type=int, default=8, metavar="P", help="the prompt's length (default: 8)"
    )
    generate_cmd.add_argument(
        "--tokens", type=int, default=32, metavar="T", help="tokens to generate (default: 32)"
    )
    generate_cmd.add_argument(
        "--batch", type=int, default=1, metavar="B", help="prompts decoded at once (default: 1)"
    )
    generate_cmd.add_argument(
        "--config",
        metavar="NAME",
        help="the recipe's config (default: tiny on emu, else the recipe's own)",
    )
    generate_cmd.add_argument(
        "--dtype", choices=FLOAT_NAMES, help="the model's dtype (default: the config's)"
    )
    generate_cmd.add_argument(
        "--device", choices=["cuda", "emu"], default="emu", help="where to run (default: emu)"
    )
    generate_cmd.add_argument(
        "--check",
        action="store_true",
        help="decode with torch eager too; exit 1 unless every token is the same",
    )
    generate_cmd.add_argument(
        "--strict",
        action="store_true",
        help="a model directory's graph that fails to compile is an error, not run eagerly"
        " with a warning (EMMY_STRICT=1 does the same for any process)",
    )
    generate_cmd.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    if hf.is_model_dir(args.recipe):
        return generate_model_dir(args)
    # torch runs the decode loop and the eager reference; the other commands need not load it
    from emmy.decode import check_lengths, greedy, greedy_eager, prompt

    case = decode_case(args.recipe, args.config or run_config(args), args.dtype, args.batch)
    check_lengths(args.prompt_len, args.tokens, case.size["max_len"])
    print(f"model {case.describe()}", file=sys.stderr)
    device = make_device(args.device)
    where = "cuda" if args.device == "cuda" else "cpu"
    _, step, caches = build_decoder(case, where)
    ids = prompt(args.batch, args.prompt_len, case.config["vocab"]).to(where)
    generation = greedy(step, ids, caches, args.tokens, device)
    for row, tokens in enumerate(generation.tokens.tolist()):
        print(f"row {row}: {' '.join(map(str, tokens))}")
    _print_generation(args, generation, device.identity)
    if not args.check:
        return 0
    _, eager_step, eager_caches = build_decoder(case, where)
    expected = greedy_eager(eager_step, ids, eager_caches, args.tokens).tokens
    return _check_tokens(generation.tokens, expected)


def generate_model_dir(args: argparse.Namespace) -> int:
    """emmy generate of a Hugging Face model directory: its generate() with a static cache,
    the forward compiled by torch.compile with emmy's backend."""
    # torch and transformers run the model; the other commands need not load them
    from emmy.decode import CausalLM, check_lengths, hf_greedy, hf_greedy_emmy, prompt

    if args.config:
        raise EmmyError("--config chooses a recipe's config; a model directory has its config.json")
    case = hf.resolve(
        Path(args.recipe), {"batch": args.batch, "seq": args.prompt_len}, args.dtype, {}
    )
    print(f"model {case.describe()}", file=sys.stderr)
    wrapped, _ = hf.build(case)
    model = wrapped.model
    if not isinstance(model, CausalLM):
        raise EmmyError(f"{args.recipe} is not a causal language model: it has no generate()")
    positions = getattr(model.config, "max_position_embeddings", args.prompt_len + args.tokens)
    check_lengths(args.prompt_len, args.tokens, positions)
    where = "cuda" if args.device == "cuda" else "cpu"
    model = model.to(where)
    ids = prompt(args.batch, args.prompt_len, model.config.vocab_size).to(where)
    expected = hf_greedy(model, ids, args.tokens).tokens if args.check else None
    device = make_device(args.device)
    print("compiling the forward's graphs (generate's first pass)", file=sys.stderr)
    generation = hf_greedy_emmy(model, ids, args.tokens, device, strict=args.strict)
    for row, tokens in enumerate(generation.tokens.tolist()):
        print(f"row {row}: {' '.join(map(str, tokens))}")
    _print_generation(args, generation, device.identity)
    return 0 if expected is None else _check_tokens(generation.tokens, expected)


def _print_generation(args: argparse.Namespace, generation, identity: str) -> None:
    print(
        f"prefill of {args.prompt_len} token(s): {generation.prefill_s * 1000:.1f} ms; decode: "
        f"{generation.steps} step(s) in {generation.decode_s:.3f} s, "
        f"{generation.tokens_per_s():.1f} tokens/s (batch {args.batch}) on {identity}"
    )


def _check_tokens(actual, expected) -> int:
    """0 where emmy's tokens are torch eager's, else 1, with a line saying which."""
    # the comparison is torch's, as the tokens are
    from emmy.decode import first_mismatch

    mismatch = first_mismatch(actual, expected)
    if mismatch is None:
        print(f"check: all {expected.numel()} tokens equal torch eager's")
        return 0
    row, index = mismatch
    print(
        f"check: row {row} token {index} is {int(actual[row, index])}; torch eager gives "
        f"{int(expected[row, index])}"
    )
    return 1
