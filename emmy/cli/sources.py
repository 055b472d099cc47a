"""What every command compiles: the options that name a recipe, a model directory or
an expression and decide its forks, and the graph text, options and device they give."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from emmy.base.compile_options import CompileOptions, Pins, parse_pins
from emmy.base.dtypes import FLOAT_NAMES
from emmy.base.errors import EmmyError
from emmy.build import build_program
from emmy.frontend import hf
from emmy.frontend.cache import parse_graph, traced_graph_text
from emmy.frontend.recipes import (
    decode_case,
    decode_graph_text,
    recipe_dir,
    recipe_graph_text,
    resolve_case,
)
from emmy.runtime.emu import EmuDevice

EXAMPLE = "torch.nn.Softmax(dim=-1)(torch.randn(4, 1000))"


def add_source(parser: argparse.ArgumentParser) -> None:
    """The options that say what to compile and how its forks are decided."""
    add_model_options(parser)
    _add_fallback_option(parser)
    _add_decision_options(parser)


def _add_fallback_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail on the first op emmy has no kernel for, naming it and its source line "
        "(default: such ops run through torch between emmy's kernels, and are reported)",
    )


def add_cuda_graphs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="on cuda, issue every launch from Python at every call (default: the second "
        "call captures the launch list as one CUDA graph and later calls replay it)",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The recipe, model directory or expression, and which of its configs, sizes, dims
    and dtypes."""
    parser.add_argument(
        "recipe",
        nargs="?",
        metavar="RECIPE|DIR",
        help="a model of recipes/ (mlp, gpt2, llama), the path of a recipe folder, or a "
        "Hugging Face model directory: its config.json and its *.safetensors weights (random "
        "weights from seed 0 where it has none); nothing is downloaded, and transformers "
        "(the test extra) must be installed. A directory's model is called with input_ids and "
        f"an attention_mask whose second row is padded, batch {hf.DEFAULT_SIZE['batch']} and "
        f"seq {hf.DEFAULT_SIZE['seq']} unless --dim says otherwise",
    )
    parser.add_argument(
        "-c",
        dest="expression",
        metavar="EXPR",
        help=f'a PyTorch expression, e.g. "{EXAMPLE}"; `emmy.rope(...)` and '
        "`emmy.cached_attention(...)` call emmy's own ops (emmy.frontend.ops)",
    )
    parser.add_argument(
        "--config",
        metavar="NAME",
        help="the recipe's config (default: the recipe's own; `emmy run` on emu: tiny)",
    )
    parser.add_argument(
        "--size",
        type=int,
        default=0,
        metavar="I",
        help="which of the config's example sizes (default: 0, the first)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="set a dim the recipe declares dynamic (e.g. seq=300), within its declared range; "
        "the other dims are those of --size; a model directory's dims are batch and seq "
        "(repeatable)",
    )
    parser.add_argument(
        "--dtype", choices=FLOAT_NAMES, help="the model's dtype (default: the config's)"
    )
    parser.add_argument(
        "--decode",
        action="store_true",
        help="the recipe's decode step (one new token over its KV cache) instead of its "
        "forward, at --dim batch=B (default 1) and max_len=L (default: the recipe's)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of a model directory's config.json, e.g. num_hidden_layers=2 "
        "(VALUE as JSON, else a string; repeatable)",
    )


def _add_decision_options(parser: argparse.ArgumentParser) -> None:
    """Pins, the oracle stack and its stores, and the compile cache."""
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="FORK=VALUE",
        help="force a fork's value (repeatable; FAMILY.FORK for one family); with --bench, "
        "FORK=V1,V2 measures each value",
    )
    parser.add_argument(
        "--oracles",
        default="",
        metavar="LIST",
        help="the oracle stack, in order (default: pins,golden,db,prior,target,default; target: the vendor library for matmuls, convolutions, their gradients and attentions on a GPU)",
    )
    parser.add_argument(
        "--db",
        default="",
        metavar="PATH",
        help="the tuning database (default: ~/.cache/emmy/autotune.db; 'none' for none)",
    )
    parser.add_argument(
        "--golden",
        default="",
        metavar="DIR",
        help="a recipe folder whose golden/<device>.json comes before the model-agnostic one",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="compile afresh even when the same graph, options and stores were compiled before",
    )


def default_target() -> str:
    # the CUDA bindings take ~0.25 s to load, which a compile with --target does not need
    from emmy.runtime.cuda import CudaDevice, cuda_available

    if cuda_available():
        with CudaDevice() as device:
            return device.identity
    return "emu"


def options_of(args: argparse.Namespace, target: str, pins: Pins | None = None) -> CompileOptions:
    """The command line's options of a compile for `target`: its pins (unless `pins`), its
    oracles and stores."""
    options = CompileOptions.parse(
        target=target, oracles=args.oracles, db=args.db, golden=args.golden or _recipe_golden(args)
    )
    return replace(options, pins=parse_pins(",".join(args.pin)) if pins is None else pins)


def compile_program(
    graph,
    options: CompileOptions,
    args: argparse.Namespace,
    constants=(),
    where: str = "<graph>",
):
    """The program of a graph (its text or a module) compiled as `options` say, through
    the program cache unless --no-cache."""
    return build_program(
        graph,
        options,
        constants=list(constants),
        use_cache=not args.no_cache and not getattr(args, "verify_each", False),
        where=where,
        verify_each=getattr(args, "verify_each", False) or None,
    )


def _recipe_golden(args: argparse.Namespace) -> str:
    """A recipe's own golden folder is read first, before the model-agnostic one."""
    if getattr(args, "recipe", None) is None or hf.is_model_dir(args.recipe):
        return ""
    return str(recipe_dir(args.recipe))


def check_source(args: argparse.Namespace) -> None:
    if (args.recipe is None) == (args.expression is None):
        raise EmmyError("give either a RECIPE, a model DIR or -c EXPR (one of them)")
    if args.expression is not None and args.dim:
        raise EmmyError("--dim sets a recipe's dynamic dim; a -c expression has its shapes in it")
    model_dir = args.recipe is not None and hf.is_model_dir(args.recipe)
    if args.decode and (args.recipe is None or model_dir):
        raise EmmyError("--decode compiles a recipe's decode step; give a RECIPE")
    if args.decode and args.size:
        raise EmmyError("--decode sets its sizes with --dim batch=B and max_len=L, not --size")
    if model_dir and (args.config or args.size):
        raise EmmyError(
            "--config and --size choose a recipe's config; a model directory has its "
            "config.json (change a field with --set FIELD=VALUE, the sizes with --dim)"
        )
    if args.overrides and not model_dir:
        raise EmmyError("--set changes a model directory's config.json; give a model DIR")


def model_dir_case(args: argparse.Namespace) -> hf.ModelDir:
    """The model directory the command names, at its --dim sizes, --dtype and --set fields."""
    return hf.resolve(Path(args.recipe), _dims(args.dim), args.dtype, _overrides(args.overrides))


def _overrides(values: list[str]) -> dict[str, object]:
    """--set FIELD=VALUE flags as a mapping, each value read as JSON, else as a string."""
    overrides: dict[str, object] = {}
    for value in values:
        name, equals, text = value.partition("=")
        if not equals or not name.isidentifier():
            raise EmmyError(f"--set {value!r}: expected FIELD=VALUE, e.g. num_hidden_layers=2")
        try:
            overrides[name] = json.loads(text)
        except json.JSONDecodeError:
            overrides[name] = text
    return overrides


def recipe_case(args: argparse.Namespace, default_config: str | None = None):
    dims = _dims(args.dim)
    return resolve_case(args.recipe, args.config or default_config, args.size, args.dtype, dims)


def decode_recipe_case(args: argparse.Namespace, default_config: str | None = None):
    """The recipe's decode step at --config, --dtype and --dim batch= and max_len=."""
    dims = _dims(args.dim)
    unknown = sorted(set(dims) - {"batch", "max_len"})
    if unknown:
        raise EmmyError(f"--decode takes the dims batch and max_len, not {', '.join(unknown)}")
    config = args.config or default_config
    return decode_case(args.recipe, config, args.dtype, dims.get("batch", 1), dims.get("max_len"))


def _dims(values: list[str]) -> dict[str, int]:
    """--dim NAME=N flags as a mapping."""
    dims: dict[str, int] = {}
    for value in values:
        name, equals, number = value.partition("=")
        if not equals or not name.isidentifier() or not number.strip().isdigit():
            raise EmmyError(f"--dim {value!r}: expected NAME=N, e.g. seq=300")
        dims[name] = int(number)
    return dims


def source_text(
    args: argparse.Namespace, default_config: str | None = None, timings: dict | None = None
):
    """The graph to compile as text, the names of its constants, and where it came from;
    from a recipe, a model directory or -c, through the frontend caches (an export's stages
    timed into `timings`)."""
    check_source(args)
    if args.recipe is not None and hf.is_model_dir(args.recipe):
        case = model_dir_case(args)
        print(f"model {case.describe()}", file=sys.stderr)
        text, constants = hf.graph_text(case, timings)
        where = f"<model directory {case.directory}>"
    elif args.recipe is not None and args.decode:
        case = decode_recipe_case(args, default_config)
        print(f"model {case.describe()}: its decode step", file=sys.stderr)
        text, constants = decode_graph_text(case, timings)
        where = f"<recipe {case.name}, decode step>"
    elif args.recipe is not None:
        case = recipe_case(args, default_config)
        print(f"model {case.describe()}", file=sys.stderr)
        text, constants = recipe_graph_text(case, timings)
        where = f"<recipe {case.name}>"
    else:
        text, constants, where = traced_graph_text(args.expression), [], f"<{args.expression}>"
    if args.no_fallback and "fallback.call" in text:
        refuse_fallbacks(parse_graph(text, where))
    return text, constants, where


def refuse_fallbacks(module) -> None:
    """Under --no-fallback, a graph with an op emmy has no kernel for is an error."""
    # a graph with a fallback is parsed to name it: one without never loads xDSL here
    from emmy.dialects.fallback import first_fallback_error

    error = first_fallback_error(module)
    if error is not None:
        raise EmmyError(error)


def run_config(args: argparse.Namespace) -> str | None:
    """On the emulator a recipe runs its tiny config unless told otherwise."""
    return "tiny" if args.device == "emu" else None


def make_device(name: str, flags: str = ""):
    if name == "cuda":
        # the CUDA bindings take ~0.25 s to load, which the emulator does not need
        from emmy.runtime.cuda import CudaDevice

        return CudaDevice(flags=flags)
    return EmuDevice(flags=flags)
