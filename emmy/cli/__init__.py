"""The `emmy` command: compile, run and bench models (recipes, local Hugging Face model
directories) and PyTorch expressions; manage golden files.

A user mistake (a bad expression, an unknown op, a bad pin, a missing device, a malformed
store) is printed as one line `emmy: error: ...` with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys

from emmy.base.errors import EmmyError
from emmy.campaign.campaign_cli import add_campaign_commands
from emmy.cli.compile_command import add_compile_command, explain_lines
from emmy.cli.generate_command import add_generate_command
from emmy.cli.golden_command import add_golden_command
from emmy.cli.run_command import add_run_command
from emmy.cli.sources import add_model_options, make_device, source_text
from emmy.dataset.dataset_cli import add_db_commands
from emmy.fitting.prior_cli import add_fit_eval_commands

# scripts and benchmarks import these from here
__all__ = ["build_parser", "entry", "explain_lines", "main", "make_device"]


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
    add_compile_command(commands)
    add_run_command(commands)
    add_generate_command(commands)
    add_golden_command(commands)
    add_db_commands(commands)
    add_campaign_commands(commands, add_model_options, source_text)
    add_fit_eval_commands(commands)
    return parser


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
