"""`emmy run`: a model or an expression compiled and run on a device, checked against
torch eager (`--check`), or its sites benched into the tuning database (`--bench`)."""

from __future__ import annotations

import argparse
import copy
import sys
import time

from emmy.base.compile_options import NO_DATABASE, Pins, parse_pin_values
from emmy.base.dtypes import is_half, torch_dtype_name
from emmy.base.errors import EmmyError
from emmy.cli.sources import (
    add_cuda_graphs_option,
    add_source,
    check_source,
    compile_program,
    decode_recipe_case,
    make_device,
    model_dir_case,
    options_of,
    recipe_case,
    run_config,
    source_text,
)
from emmy.frontend import hf
from emmy.frontend.recipes import (
    build,
    decode_step_example,
)
from emmy.recall.tuning_db import TuningDB


def add_run_command(commands: argparse._SubParsersAction) -> None:
    run_cmd = commands.add_parser(
        "run",
        help="compile and run a model or an expression on a device, or bench its sites",
        description="Compile a recipe's model (on emu: its tiny config), a local Hugging Face "
        "model directory or a PyTorch expression and run its kernels on the example inputs; --check compares with torch "
        "eager. With "
        "--bench, time the compiler's pick of every site against the requested configs and "
        "record every row in the tuning database.",
    )
    add_source(run_cmd)
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
    add_cuda_graphs_option(run_cmd)
    _add_bench_options(run_cmd.add_argument_group("bench"))
    run_cmd.set_defaults(handler=cmd_run)


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


def cmd_run(args: argparse.Namespace) -> int:
    if args.bench:
        return cmd_bench(args)
    check_source(args)
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
        case = decode_recipe_case(args, run_config(args))
        print(f"model {case.describe()}: its decode step", file=sys.stderr)
        model, inputs = decode_step_example(case)
    else:
        case = recipe_case(args, run_config(args))
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
    text, constants, where = source_text(args, run_config(args))
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
