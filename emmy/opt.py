"""emmy-opt: xdsl-opt with emmy's dialects, passes and the CUDA target. A compile's whole
pipeline is emmy.passes.pipeline.compile_pipeline's text.

emmy-opt softmax.mlir -p resolve-forks{pin="vec=2"},specialize-forks -t cuda
emmy-opt emmy/families/softmax/softmax.emmy      # a .emmy file, at each kernel's example key
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.xdsl_opt_main import xDSLOptMain

from emmy.backend.emit_cuda import emit_module
from emmy.base.errors import EmmyError
from emmy.dialects.evidence import Evidence
from emmy.dialects.fallback import Fallback
from emmy.dialects.fork import Fork
from emmy.dialects.graph import Graph
from emmy.dialects.host import Host
from emmy.dialects.kernel import Kernel
from emmy.dsl.parser import parse_source
from emmy.passes.pipeline import PASSES
from emmy.passes.verify import InvalidIR, verify_dominance
from emmy.sites.lower import instantiate


def _emmy_frontend(stream: IO[bytes]) -> ModuleOp:
    name = getattr(stream, "name", "<stdin>")
    decls = parse_source(stream.read().decode(), str(name))
    sites = []
    for decl in decls:
        if not decl.example:
            raise EmmyError(f"{name}: kernel {decl.name} has no `example` key to instantiate")
        sites.append(instantiate(decl, decl.example, decl.name))
    return ModuleOp(sites)


def _cuda_target(module: ModuleOp, output: IO[str]) -> None:
    output.write(emit_module(module).source)


class EmmyOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for dialect in (Graph, Fallback, Fork, Evidence, Kernel, Host):
            self.ctx.register_dialect(dialect.name, lambda d=dialect: d)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, emmy_pass in PASSES.items():
            self.register_pass(name, lambda p=emmy_pass: p)

    def setup_pipeline(self) -> None:
        """xdsl-opt's pipeline, whose callback between passes verifies the module, also
        verifies its dominance (as a compile does after every pass), naming the pass."""
        super().setup_pipeline()
        between = self.pipeline.callback

        def callback(previous: ModulePass | None, module: ModuleOp, next_pass: ModulePass | None):
            if between is not None:
                between(previous, module, next_pass)
            if self.args.disable_verify:
                return
            try:
                verify_dominance(module)
            except InvalidIR as error:
                when = "as parsed" if previous is None else f"after pass {previous.name}"
                raise EmmyError(f"the IR is invalid {when}: {error}") from error

        self.pipeline = replace(self.pipeline, callback=callback)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["cuda"] = _cuda_target

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["emmy"] = _emmy_frontend


def main() -> None:
    try:
        EmmyOptMain(description="emmy's modular optimizer driver").run()
    except EmmyError as error:
        print(f"emmy-opt: error: {error}", file=sys.stderr)
        sys.exit(2)
