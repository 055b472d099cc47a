"""`emmy fit` and `emmy eval`: the prior's commands. JAX is imported by `emmy fit` alone, and
only once it runs, so `emmy --help` and every other command work without the [fit] extra."""

from __future__ import annotations

import argparse
from pathlib import Path

from emmy.base.errors import EmmyError

NEEDS_JAX = "emmy fit needs JAX: pip install -e '.[fit]'"


def add_fit_eval_commands(commands) -> None:
    """Adds `fit` and `eval` to the subparsers of `emmy`."""
    fit_cmd = commands.add_parser(
        "fit",
        help="fit the learned prior on a dataset (needs the [fit] extra: JAX)",
        description="Fit the prior (per family, an ensemble of small MLPs predicting log time from "
        "features of the key, the config and the device) on a dataset written by `emmy db "
        "export`, holding out keys by a hash of the key; write weights.npz and metadata.json.",
    )
    fit_cmd.add_argument(
        "--dataset", required=True, type=Path, metavar="DIR", help="dataset folder"
    )
    fit_cmd.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help="where to write the prior (default: emmy/recall/committed_prior/, the committed one)",
    )
    fit_cmd.add_argument(
        "--epochs", type=int, default=400, metavar="N", help="most epochs (default: 400)"
    )
    fit_cmd.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default: 0)")
    fit_cmd.set_defaults(handler=cmd_fit)

    eval_cmd = commands.add_parser(
        "eval",
        help="score the prior and the other ways to pick on a dataset's held-out keys",
        description="Per pool of a dataset: coverage, and on the keys held out of the fit the "
        "top-1, top-5 and regret of the prior, the declared default, the nearest measured "
        "key and the golden files.",
    )
    eval_cmd.add_argument(
        "view", nargs="?", metavar="VIEW", help="only this pool id, family or device"
    )
    eval_cmd.add_argument(
        "--dataset", required=True, type=Path, metavar="DIR", help="dataset folder"
    )
    eval_cmd.add_argument(
        "--prior",
        type=Path,
        metavar="DIR",
        help="the prior to score (default: $EMMY_PRIOR_DIR, else the committed one)",
    )
    eval_cmd.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots here")
    eval_cmd.set_defaults(handler=cmd_eval)


def cmd_fit(args: argparse.Namespace) -> int:
    if args.epochs < 1:
        raise EmmyError(f"--epochs {args.epochs}: must be at least 1")
    try:
        # JAX is optional (the fit extra, which the type checker's venv lacks): without it
        # `emmy fit` is one line, and no other command loads it
        import jax  # noqa: F401  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise EmmyError(NEEDS_JAX) from None
    from emmy.fitting.prior_fit import fit  # fits with JAX (see above)

    fit(args.dataset, args.output, epochs=args.epochs, seed=args.seed)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    # emmy eval reads the kernel library and the oracles (xDSL): the other commands need not
    from emmy.fitting.prior_eval import cmd_eval as run

    return run(args)
