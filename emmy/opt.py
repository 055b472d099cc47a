"""emmy-opt: xdsl-opt with emmy's dialects, passes and the CUDA target.

emmy-opt softmax.mlir -p resolve-forks{pin="vec=2"},specialize-forks -t cuda
emmy-opt emmy/library/softmax.emmy      # a .emmy file, at each kernel's example key
"""

from __future__ import annotations

import sys
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.xdsl_opt_main import xDSLOptMain

from emmy.errors import EmmyError


def _emmy_frontend(stream: IO[bytes]) -> ModuleOp:
    from emmy.dsl.library import instantiate
    from emmy.dsl.parser import parse_source

    name = getattr(stream, "name", "<stdin>")
    decls = parse_source(stream.read().decode(), str(name))
    sites = []
    for decl in decls:
        if not decl.example:
            raise EmmyError(f"{name}: kernel {decl.name} has no `example` key to instantiate")
        sites.append(instantiate(decl, decl.example, decl.name))
    return ModuleOp(sites)


def _cuda_target(module: ModuleOp, output: IO[str]) -> None:
    from emmy.backend.emit_cuda import emit_module

    output.write(emit_module(module).source)


class EmmyOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        from emmy.dialects.fork import Fork
        from emmy.dialects.graph import Graph
        from emmy.dialects.kernel import Kernel

        for dialect in (Graph, Fork, Kernel):
            self.ctx.register_dialect(dialect.name, lambda d=dialect: d)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        from emmy.passes.attention_paths import AttentionPaths
        from emmy.passes.inline_host_paths import InlineHostPaths
        from emmy.passes.lower_graph import LowerGraph
        from emmy.passes.matmul_paths import MatmulPaths
        from emmy.passes.recognise_attention import RecogniseAttention
        from emmy.passes.resolve_forks import ResolveForks
        from emmy.passes.specialize_forks import SpecializeForks

        passes = (
            RecogniseAttention,
            AttentionPaths,
            LowerGraph,
            MatmulPaths,
            ResolveForks,
            SpecializeForks,
            InlineHostPaths,
        )
        for emmy_pass in passes:
            self.register_pass(emmy_pass.name, lambda p=emmy_pass: p)

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
