"""The `emmy` command: compile, run and bench models (recipes, local Hugging Face model
directories) and PyTorch expressions; manage golden files.

A user mistake (a bad expression, an unknown op, a bad pin, a missing device, a malformed
store) is printed as one line `emmy: error: ...` with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import gc
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from emmy.backend.occupancy import devices_of, occupancy
from emmy.build import CACHE_HIT, build_program
from emmy.campaign.campaign_cli import add_campaign_commands
from emmy.compile_options import NO_DATABASE, CompileOptions, Pins, parse_pin_values, parse_pins
from emmy.dataset.dataset_cli import add_db_commands
from emmy.dtypes import FLOAT_NAMES, is_half, torch_dtype_name
from emmy.errors import EmmyError
from emmy.fitting.prior_cli import add_fit_eval_commands
from emmy.frontend import hf
from emmy.frontend.cache import parse_graph, traced_graph_text
from emmy.frontend.recipes import (
    build,
    build_decoder,
    decode_case,
    decode_graph_text,
    decode_step_example,
    recipe_dir,
    recipe_graph_text,
    resolve_case,
)
from emmy.identity import EMU, arch_of
from emmy.program import SiteProvenance, coverage_line, per_element_line
from emmy.recall.golden import MODEL_AGNOSTIC_DIR, promote
from emmy.recall.tuning_db import TuningDB, default_db_path
from emmy.regime import regime_for
from emmy.runtime.emu import EmuDevice

EXAMPLE = "torch.nn.Softmax(dim=-1)(torch.randn(4, 1000))"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except EmmyError as error:
        print(f"emmy: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("emmy: interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emmy",
        description="Compile PyTorch models and expressions to CUDA kernels whose choices are "
        "recalled, not autotuned.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_compile_command(commands)
    _add_run_command(commands)
    _add_generate_command(commands)
    _add_golden_command(commands)
    add_db_commands(commands)
    add_campaign_commands(commands, _add_model_options, source_text)
    add_fit_eval_commands(commands)
    return parser


def _add_compile_command(commands: argparse._SubParsersAction) -> None:
    compile_cmd = commands.add_parser(
        "compile",
        help="compile a model or an expression to CUDA (needs no GPU)",
        description="Compile a recipe's model, a local Hugging Face model directory "
        "(config.json, and safetensors weights if any) or a PyTorch expression: CUDA source, "
        "cubin for --target, the launch plan and a report. Each fork is decided by the oracle stack: pins, golden files, the tuning "
        "database, the prior, the target default (on a GPU: the vendor library for matmuls and "
        "attentions), the declared default.",
    )
    _add_source(compile_cmd)
    compile_cmd.add_argument(
        "--target",
        metavar="DEVICE",
        help="device identity to compile for, e.g. nvidia-h200-sm90, or emu "
        "(default: this machine's GPU, else emu)",
    )
    compile_cmd.add_argument(
        "--explain",
        action="store_true",
        help="print every site's config, its source and evidence, and (for a GPU target) each"
        " kernel's registers, spills, shared memory and occupancy",
    )
    compile_cmd.add_argument(
        "-o", "--output", metavar="DIR", type=Path, help="write source, cubin and report here"
    )
    compile_cmd.add_argument(
        "--verify-each",
        action="store_true",
        help="verify the IR in full after every pass, its ops' verifiers too (dominance is"
        " checked after each anyway; compiles afresh: a cached program is not read)",
    )
    compile_cmd.set_defaults(handler=cmd_compile)


def _add_run_command(commands: argparse._SubParsersAction) -> None:
    run_cmd = commands.add_parser(
        "run",
        help="compile and run a model or an expression on a device, or bench its sites",
        description="Compile a recipe's model (on emu: its tiny config), a local Hugging Face "
        "model directory or a PyTorch expression and run its kernels on the example inputs; --check compares with torch "
        "eager. With "
        "--bench, time the compiler's pick of every site against the requested configs and "
        "record every row in the tuning database.",
    )
    _add_source(run_cmd)
    run_cmd.add_argument(
        "--device", choices=["cuda", "emu"], default="emu", help="where to run (default: emu)"
    )
    run_cmd.add_argument(
        "--check",
        action="store_true",
        help="compare the result with torch eager (a model at three calls: its example inputs,"
        " then other values, the second capturing a graph of the launches and the third"
        " replaying it); the first call waits for each launch, so a fault names the launch"
        " that made it",
    )
    run_cmd.add_argument(
        "--schedule",
        default="forward",
        help="emulator thread order: forward, reverse or shuffle[:SEED], with +eager to perform"
        " each cp.async at issue instead of at its wait (default: forward)",
    )
    _add_cuda_graphs_option(run_cmd)
    _add_bench_options(run_cmd.add_argument_group("bench"))
    run_cmd.set_defaults(handler=cmd_run)


def _add_generate_command(commands: argparse._SubParsersAction) -> None:
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


def _add_bench_options(bench: argparse._ArgumentGroup) -> None:
    bench.add_argument("--bench", action="store_true", help="measure and record instead of run")
    bench.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="FORK|all",
        help="measure every valid value of a fork over the pick (repeatable), or every config",
    )
    bench.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="also measure N valid configs drawn at random (the same N for the same site)",
    )
    bench.add_argument(
        "--max-rows", type=int, default=32, metavar="N", help="rows per site besides the pick (32)"
    )
    bench.add_argument(
        "--force", action="store_true", help="re-measure configs already in the database"
    )
    bench.add_argument(
        "--nvcc-flags",
        default="",
        metavar="FLAGS",
        help='code-generation flags of the bench\'s regime, e.g. "-Xnvvm -opt=1" (one flag: --nvcc-flags=FLAG) '
        "(rows are recorded under that regime; no ordinary compile reads them)",
    )


def _add_golden_command(commands: argparse._SubParsersAction) -> None:
    golden_cmd = commands.add_parser(
        "golden", help="golden configuration files", description="Golden configuration files."
    )
    golden_sub = golden_cmd.add_subparsers(dest="golden_command", required=True, metavar="ACTION")
    promote_cmd = golden_sub.add_parser(
        "promote",
        help="write the measured winners of a device into a golden file",
        description="For every site measured on DEVICE under its deployable regime, write the "
        "fastest clean config into a golden file, with its margin over the runner-up and over "
        "the compiler's old pick.",
    )
    promote_cmd.add_argument("--device", required=True, metavar="DEVICE", help="e.g. emu")
    promote_cmd.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="golden file to write or update (default: the model-agnostic one of DEVICE)",
    )
    promote_cmd.add_argument("--family", help="only this family")
    promote_cmd.add_argument("--key", help="only this problem key")
    promote_cmd.add_argument("--db", metavar="PATH", default="", help="tuning database to read")
    promote_cmd.set_defaults(handler=cmd_golden_promote)


def _add_source(parser: argparse.ArgumentParser) -> None:
    """The options that say what to compile and how its forks are decided."""
    _add_model_options(parser)
    _add_fallback_option(parser)
    _add_decision_options(parser)


def _add_fallback_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail on the first op emmy has no kernel for, naming it and its source line "
        "(default: such ops run through torch between emmy's kernels, and are reported)",
    )


def _add_cuda_graphs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="on cuda, issue every launch from Python at every call (default: the second "
        "call captures the launch list as one CUDA graph and later calls replay it)",
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
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


def _check_source(args: argparse.Namespace) -> None:
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
    _check_source(args)
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


def cmd_compile(args: argparse.Namespace) -> int:
    # a compile is short and leaves few reference cycles, while each full pass of the
    # collector walks every object torch, torch.export and xDSL made: ~0.5 s of a cold
    # GPT-2 compile
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile(args)
    finally:
        if enabled:
            gc.enable()


def _compile(args: argparse.Namespace) -> int:
    total = time.perf_counter()
    target = args.target or default_target()
    start = time.perf_counter()
    frontend_stages: dict[str, float] = {}
    text, constants, where = source_text(args, timings=frontend_stages)
    frontend = time.perf_counter() - start
    program = compile_program(
        text, options_of(args, target), args, constants=constants, where=where
    )
    if CACHE_HIT in program.timings:
        program.timings = {"frontend": frontend, **program.timings}
    else:
        program.timings["frontend"] = frontend
        program.timings.update(frontend_stages)
    program.timings["total"] = time.perf_counter() - total
    if args.explain:
        for line in explain_lines(program):
            print(line)
    for name, info in program.kernels.items():
        resources = program.resources.get(name)
        usage = ""
        if resources:
            usage = f", {resources['registers']} registers, {resources['spill_stores']} B spilled"
        print(f"{name}: {info.family} [{info.key}] grid {info.grid} block {info.block}{usage}")
    if args.output:
        for path in program.write(args.output):
            print(f"wrote {path}")
    memory = program.memory()
    if program.constants:
        print(
            f"launch plan: {len(program.calls)} launches of {len(program.kernels)} kernels; "
            f"weights {memory['constants'] / 2**20:.1f} MiB, temporaries in a "
            f"{memory['arena'] / 2**20:.1f} MiB arena (unshared: "
            f"{memory['temporaries_unshared'] / 2**20:.1f} MiB)"
        )
    timings = ", ".join(
        f"{k} {v * 1000:.0f} ms" for k, v in program.timings.items() if k != "nvrtc_cache_hit"
    )
    print(f"ops: {coverage_line(program)}")
    print(f"compiled for {target}: {timings}")
    return 0


def explain_lines(program) -> list[str]:
    """What the compile's golden step did, where the graph's ops run, then one row per
    site: family, key, config (pinned forks marked), source, evidence; one per host call
    the device runs (the vendor library's matmul or attention); one per op torch runs (a fallback), with
    why and where the model calls it; the ops whose FLOPs were counted one per element;
    then each kernel's resources (resource_lines)."""
    # the registry loads the kernel library (xDSL), which a program-cache hit does not need
    from emmy.families.registry import registered

    rows = [("site", "family", "key", "config", "source", "evidence")]
    sites = [(name, c.family, c.key, c.config) for name, c in program.choices.items()]
    sites += [(name, i.family, i.key, i.config) for name, i in program.kernels.items()]
    for name, family_name, key, site_config in sites:
        provenance = program.provenance.get(name, SiteProvenance({}))
        forks = provenance.forks
        config = " ".join(
            f"{k}={v}{'(pin)' if forks.get(k) == 'pin' else ''}" for k, v in site_config.items()
        )
        rows.append(
            (name, family_name, key, config, provenance.oracle or "?", _evidence(provenance))
        )
    for name, call in program.host_calls.items():
        runs_by = registered(call["family"]).runs_by
        rows.append((name, call["family"], call["key"], "-", "host call", runs_by))
    for name, call in program.fallbacks.items():
        where = f" at {call['source']}" if call["source"] else ""
        rows.append((name, "torch", call["target"], "-", "fallback", f"{call['reason']}{where}"))
    return [
        *program.golden_imports,
        f"ops: {coverage_line(program)}",
        *_aligned(rows),
        per_element_line(program),
        *resource_lines(program),
    ]


def _aligned(rows: list[tuple[str, ...]], indent: str = "") -> list[str]:
    """The rows as columns two spaces apart, each as its widest cell (the last one
    left as it is)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        indent + "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]


def resource_lines(program) -> list[str]:
    """One row per kernel: what ptxas reports (registers, spill stores/loads, shared memory
    static + the launch's dynamic) and the occupancy it reaches on each device of the
    target's arch (emmy.backend.occupancy); on the emulator, one line saying why none."""
    if program.target == EMU:
        return [
            "resources: none on emu: g++ compiles its kernels, while registers, spills, shared"
            " memory and occupancy are what ptxas reports for a GPU target"
            " (e.g. --target nvidia-h200-sm90)"
        ]
    arch = arch_of(program.target)
    if not program.resources:
        return [f"resources: none: the kernels were not compiled for {arch}"]
    devices = devices_of(arch)
    title = f"resources (ptxas, {arch}); occupancy per SM on each {arch} device of the table"
    if not devices:
        title = f"resources (ptxas, {arch}); no {arch} device in emmy/backend/occupancy.py"
    rows: list[tuple[str, ...]] = [("kernel", "registers", "spills st/ld", "smem static+dynamic")]
    rows[0] += tuple(d.identity for d in devices)
    for name, info in program.kernels.items():
        used = program.resources.get(name)
        if used is None:
            rows.append((name, "?", "?", "?", *("?" for _ in devices)))
            continue
        shared = used["shared_static"] + info.smem
        rows.append(
            (
                name,
                str(used["registers"]),
                f"{used['spill_stores']}/{used['spill_loads']} B",
                f"{used['shared_static']}+{info.smem} B",
                *(occupancy(d, info.block, used["registers"], shared).describe() for d in devices),
            )
        )
    # indented under the title: lines that start with a site's name are its decision rows
    return [title, *_aligned(rows, indent="  ")]


def _evidence(provenance: SiteProvenance) -> str:
    evidence = provenance.evidence or {}
    oracle = provenance.oracle
    if oracle == "db":
        text = f"rows {','.join(map(str, evidence.get('rows', [])))} ({evidence.get('median_s', 0) * 1e3:.3f} ms"
        text += f", best of {evidence.get('measured')} measured)"
        runner_up = provenance.runner_up
        if runner_up:
            text += f"; runner-up row {runner_up['row']} {runner_up['median_s'] * 1e3:.3f} ms"
        return text
    if oracle == "golden":
        median = evidence.get("median_s")
        return f"{evidence.get('file')}" + (f" ({median * 1e3:.3f} ms)" if median else "")
    if oracle == "default":
        moved = evidence.get("moved_by_constraints")
        return (
            f"declared default; constraints moved {', '.join(moved)}"
            if moved
            else "declared default"
        )
    if oracle == "target":
        chosen = ", ".join(f"{n}={v}" for n, v in evidence.get("options", {}).items())
        return f"target default on a {evidence.get('device_class')} ({chosen}): no evidence at this key"
    if oracle == "pins":
        return "every fork pinned"
    if oracle == "prior":
        text = (
            f"predicted {evidence.get('predicted_s', 0) * 1e3:.3f} ms, best of "
            f"{evidence.get('configs_scored')} scored (dataset {str(evidence.get('dataset'))[:12]})"
        )
        runner_up = provenance.runner_up
        if runner_up:
            text += f"; runner-up predicted {runner_up['predicted_s'] * 1e3:.3f} ms"
        return text
    return " ".join(f"{k}={v}" for k, v in evidence.items())


def cmd_run(args: argparse.Namespace) -> int:
    if args.bench:
        return cmd_bench(args)
    _check_source(args)
    if args.recipe is not None:
        return run_recipe(args)
    # torch traces the expression; the other commands need not load it
    from emmy.frontend.expression import trace
    from emmy.runtime.bound import as_model_dtype
    from emmy.runtime.convert import compare, model_tolerance

    traced = trace(args.expression, meta=False, fallback=not args.no_fallback)
    device = make_device(args.device)
    options = options_of(args, device.identity)
    program = compile_program(traced.module, options, args, constants=traced.constants)
    ((output,),), timing = run_bound(args, program, device, traced.constants, [traced.inputs])
    output = as_model_dtype(output, traced.output.dtype)
    print(
        f"ran {len(program.calls)} kernel(s) on {device.identity} {timing}: "
        f"{traced.output.dtype} {list(output.shape)}"
    )
    if not args.check:
        return 0
    # sums (a matmul's k products, a row's reduction) add in another order than torch's:
    # the tolerance of a model, scaled by the output's magnitude
    report = compare(output, traced.output, model_tolerance(output.dtype, traced.output))
    print(report.summary)
    return 0 if report.ok else 1


def _run_config(args: argparse.Namespace) -> str | None:
    """On the emulator a recipe runs its tiny config unless told otherwise."""
    return "tiny" if args.device == "emu" else None


def _reference_outputs(model, inputs) -> list:
    """torch eager's outputs; a model in f16 or bf16 runs in f32 on the same rounded
    weights, because eager rounds every intermediate while emmy rounds once per kernel."""
    # torch runs the model eagerly; the other commands need not load it
    import torch

    with torch.no_grad():
        low = [t for t in model.parameters() if is_half(torch_dtype_name(t.dtype))]
        if low:
            model = copy.deepcopy(model).float()
            inputs = [t.float() if t.is_floating_point() else t for t in inputs]
        expected = model(*inputs)
    return [expected] if isinstance(expected, torch.Tensor) else list(expected)


def run_recipe(args: argparse.Namespace) -> int:
    """Runs a recipe's model or a model directory's on the device, checked with --check."""
    if hf.is_model_dir(args.recipe):
        case = model_dir_case(args)
        print(f"model {case.describe()}", file=sys.stderr)
        model, inputs = hf.build(case)
    elif args.decode:
        case = decode_recipe_case(args, _run_config(args))
        print(f"model {case.describe()}: its decode step", file=sys.stderr)
        model, inputs = decode_step_example(case)
    else:
        case = recipe_case(args, _run_config(args))
        print(f"model {case.describe()}", file=sys.stderr)
        model, inputs = build(case)
    return run_model(args, model, inputs)


def run_model(args: argparse.Namespace, model, inputs) -> int:
    # torch exports and checks the model; the other commands need not load it
    from emmy.frontend.export import export
    from emmy.runtime.bound import as_model_dtype
    from emmy.runtime.convert import compare, model_tolerance, other_values

    graph = export(model, inputs, fallback=not args.no_fallback)
    device = make_device(args.device)
    options = options_of(args, device.identity)
    program = compile_program(graph.module, options, args, constants=graph.constants)
    # under --check, the example inputs, then other values twice: the second call captures
    # the launches as a graph, the third replays it, and each is checked
    calls = [list(inputs)]
    if args.check:
        calls += [other_values(list(inputs), seed) for seed in range(1, CHECKED_CALLS)]
    results, timing = run_bound(args, program, device, graph.constants, calls)
    memory = program.memory()
    print(
        f"ran {len(program.calls)} launch(es) of {len(program.kernels)} kernel(s) on "
        f"{device.identity} {timing}; temporaries in a "
        f"{memory['arena'] / 2**20:.2f} MiB arena (unshared {memory['temporaries_unshared'] / 2**20:.2f} MiB)"
    )
    if not args.check:
        return 0
    ok = True
    for call, (given, returned) in enumerate(zip(calls, results, strict=True)):
        outputs = [as_model_dtype(r, d) for r, d in zip(returned, graph.output_dtypes, strict=True)]
        expected = _reference_outputs(model, given)
        which = "" if call == 0 else f", call {call + 1} (other values)"
        for index, (actual, reference) in enumerate(zip(outputs, expected, strict=True)):
            tolerance = model_tolerance(actual.dtype, reference)
            report = compare(actual.float().reshape(reference.shape), reference, tolerance)
            print(f"output {index}{which}: {report.summary}")
            ok = ok and report.ok
    return 0 if ok else 1


#: the calls `emmy run --check` checks: the example inputs', then other values' (the second
#: call captures a graph of the launches, the third replays it)
CHECKED_CALLS = 3


def run_bound(
    args: argparse.Namespace, program, device, constants, calls: list
) -> tuple[list, str]:
    """The program's outputs (on the host) at each call's inputs (each output poisoned
    first, so an element no kernel wrote shows), and its timing: the first call, which
    binds the weights, then the next on the same inputs (or the later calls'), in words.
    Under --check the first call waits for each launch, so that a fault names the launch
    that made it."""
    # the bound program runs on torch tensors; the other commands need not load torch
    from emmy.runtime.bound import BoundProgram

    options = {"schedule": args.schedule}
    bound = BoundProgram(
        program,
        device,
        constants,
        poison_outputs=True,
        cuda_graphs=not args.no_cuda_graphs,
    )
    returned = []
    seconds = []
    for call, inputs in enumerate(calls if len(calls) > 1 else calls * 2):
        start = time.perf_counter()
        results = bound(inputs, sync_each_launch=args.check and call == 0, **options)
        device.synchronize()
        seconds.append(time.perf_counter() - start)
        returned.append([r.cpu() for r in results])
    first, again = seconds[0], seconds[-1]
    return returned[: len(calls)], f"in {first * 1000:.1f} ms (then {again * 1000:.1f} ms a call)"


def cmd_bench(args: argparse.Namespace) -> int:
    # the bench checks every config against torch; the other commands need not load it
    from emmy.measure.bench import Bench, BenchOptions, summary_table

    if args.max_rows < 0:
        raise EmmyError("--max-rows must be 0 or more")
    if args.db == NO_DATABASE:
        raise EmmyError("a bench records into a tuning database: --db none is not allowed")
    device = make_device(args.device, args.nvcc_flags)
    regime = device.regime
    bench_pins = parse_pin_values(args.pin)
    # the pick is the ordinary compile's choice: only single-valued pins take part in it
    pick_pins = Pins({n: v[0] for n, v in bench_pins.items() if len(v) == 1})
    text, constants, where = source_text(args, _run_config(args))
    options = options_of(args, device.identity, pick_pins)
    program = compile_program(text, options, args, constants, where)
    if not regime.is_deployable:
        print(
            f"emmy: warning: rows are recorded under regime {regime.id} ({regime.words}); "
            "no ordinary compile reads them",
            file=sys.stderr,
        )
    bench_options = BenchOptions(
        pins={n: v for n, v in bench_pins.items() if len(v) > 1},
        sweep=args.sweep,
        sample=args.sample,
        max_rows=args.max_rows,
        force=args.force,
    )
    db_path = options.db
    assert db_path is not None  # --db none is refused above
    with TuningDB(db_path) as db:
        bench = Bench(device, regime, db, bench_options)
        try:
            outcomes = bench.run(program)
        except KeyboardInterrupt:
            written = sum(not o.recalled for o in bench.outcomes)
            print(f"emmy: interrupted: {written} row(s) written to {db_path}", file=sys.stderr)
            return 130
    picks = {name: info.config for name, info in program.kernels.items()}
    picks |= {name: choice.config for name, choice in program.choices.items()}
    for line in summary_table(outcomes, picks):
        print(line)
    measured = sum(not o.recalled for o in outcomes)
    print(
        f"bench {bench.bench_id} on {device.identity} [{regime.words}]: {measured} measured, "
        f"{len(outcomes) - measured} recalled; database {db_path}"
    )
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    if hf.is_model_dir(args.recipe):
        return generate_model_dir(args)
    # torch runs the decode loop and the eager reference; the other commands need not load it
    from emmy.decode import check_lengths, greedy, greedy_eager, prompt

    case = decode_case(args.recipe, args.config or _run_config(args), args.dtype, args.batch)
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


def cmd_golden_promote(args: argparse.Namespace) -> int:
    regime = regime_for(args.device)
    output = args.output or MODEL_AGNOSTIC_DIR / f"{args.device}.json"
    db_path = Path(args.db) if args.db else default_db_path()
    with TuningDB(db_path) as db:
        entries = promote(
            db, args.device, regime.id, regime.words, output, family=args.family, key=args.key
        )
    for entry in entries:
        margin = entry.promoted_from.get("margin_over_old_pick")
        margin_text = f", {margin:.2f}x over the old pick" if margin else ""
        print(f"{entry.family} [{entry.key}]: {entry.config}{margin_text}")
    print(f"wrote {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} to {output}")
    return 0


def make_device(name: str, flags: str = ""):
    if name == "cuda":
        # the CUDA bindings take ~0.25 s to load, which the emulator does not need
        from emmy.runtime.cuda import CudaDevice

        return CudaDevice(flags=flags)
    return EmuDevice(flags=flags)


def entry() -> None:
    """The `emmy` command: main(), its exit handlers, then the end of the process without
    the interpreter's teardown (freeing torch's modules takes seconds, ~20 % of a cold
    compile of GPT-2, and the process ends anyway)."""
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            code = code or 1  # the output went nowhere, as after a normal exit
    os._exit(code)


if __name__ == "__main__":
    entry()
