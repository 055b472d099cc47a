"""One pipeline: a compile runs its passes as the text of an xDSL PassPipeline, and emmy-opt
given that text makes the same decisions (resolve-forks' options are the compile's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from emmy.base.compile_options import CompileOptions
from emmy.base.errors import EmmyError
from emmy.compiler import compile_graph, compile_variants
from emmy.frontend.cache import parse_graph
from emmy.passes.pipeline import COMPILE_PIPELINE, compile_pipeline
from emmy.passes.resolve_forks import ResolveForks

#: a row kernel with a prologue, and a product whose path is a host-level choice
GRAPH = """
func.func @main(%x : tensor<16x64xf32>, %w : tensor<64x32xf32>) -> tensor<16x32xf32> {
  %e = graph.exp %x : tensor<16x64xf32> -> tensor<16x64xf32>
  %n = graph.softmax %e {dim = 1 : i64} : tensor<16x64xf32> -> tensor<16x64xf32>
  %y = graph.matmul %n, %w : tensor<16x64xf32>, tensor<64x32xf32> -> tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}
"""


def _sites(ir: str) -> list[str]:
    """Each site's header line: its name, family, key, decision, config and provenance."""
    return sorted(line.strip() for line in ir.splitlines() if re.match(r"\s*fork\.site ", line))


def test_the_pipeline_text_names_every_pass_and_the_compiles_options() -> None:
    options = CompileOptions.parse(target="nvidia-h200-sm90", pins="vec=4", db="none")
    text = compile_pipeline(ResolveForks.of(options))
    names = [re.sub(r"\{.*\}", "", part) for part in re.split(r",(?![^{]*\})", text)]
    assert names == [p.name for p in COMPILE_PIPELINE]
    assert 'resolve-forks{pin="vec=4" target="nvidia-h200-sm90"' in text and 'db="none"' in text


def test_emmy_opt_run_on_the_compiles_pipeline_text_decides_as_the_compile(tmp_path) -> None:
    options = CompileOptions.parse(target="nvidia-h200-sm90", pins="vec=4", db="none")
    program = compile_graph(parse_graph(GRAPH, "<test>"), options, compile_kernels=False)
    source = tmp_path / "graph.mlir"
    source.write_text(GRAPH)
    opt = Path(sys.executable).with_name("emmy-opt")
    done = subprocess.run(
        [str(opt), str(source), "-p", compile_pipeline(ResolveForks.of(options))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sites = _sites(done.stdout)
    assert sites == _sites(program.ir)
    assert any('"matmul_path"' in line and 'oracle = "target"' in line for line in sites)


def test_a_bench_variant_is_made_by_the_compiles_passes() -> None:
    """A bench's kernels come from resolve-forks (each config its site's pins, the pins
    oracle alone) and specialize-forks, verified: each variant is its config, and a
    config the constraints rule out is an error naming its site, not a kernel."""
    key = {"rows": 8, "cols": 6, "T": "f32"}
    good = {"threads": 64, "rows_per_block": 2, "vec": 2, "algo": "online", "reduction": "smem"}
    program = compile_variants("softmax", key, [good, {**good, "vec": 1}], prefix="v_")
    assert [(name, info.config) for name, info in program.kernels.items()] == [
        ("v_0", good),
        ("v_1", {**good, "vec": 1}),
    ]
    with pytest.raises(EmmyError, match="no oracle decided site v_0"):
        compile_variants("softmax", key, [{**good, "vec": 4}], prefix="v_")  # 6 % 4 != 0
