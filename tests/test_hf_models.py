"""Real models on the emulator, compared with torch eager: six Hugging Face transformers,
`nn.TransformerEncoderLayer` and a small conv net (emmy.frontend.tiny_models), each at
batch 2 with padding, through `torch.compile(backend="emmy")` and `emmy.compile`; a model
directory saved with `save_pretrained`, through `emmy compile DIR` and `emmy run DIR`. In
the six transformers, every op (the mask construction included) runs in emmy's kernels.
Each compiled model is called three times, the examples and then other values
(tests/calls.py), each against eager.

The relative error of an output is max|actual - expected| / max|expected|: at most the
model tolerance's rtol of its dtype (f32: 1e-4; bf16: 5e-2, against eager in f32 on the
same rounded weights, since eager rounds every intermediate and emmy once per kernel).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from calls import each_call

import emmy
import emmy.api
from emmy.cli import main
from emmy.frontend import tiny_models
from emmy.runtime.convert import MODEL_TOLERANCES
from emmy.runtime.emu import EmuDevice

SEQ = 8
#: the models whose every op, the mask construction included, emmy compiles natively
TRANSFORMERS = list(tiny_models.TRANSFORMERS)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max|actual - expected| / max|expected|, in f32."""
    actual, expected = actual.float(), expected.float()
    return float((actual - expected).abs().max() / expected.abs().max())


def eager(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """torch eager's output, in f32 on the same (rounded) weights for a 16-bit model."""
    if next(model.parameters()).dtype != torch.float32:
        model = copy.deepcopy(model).float()
        inputs = tuple(t.float() if t.is_floating_point() else t for t in inputs)
    with torch.no_grad():
        return model(*inputs)


@functools.cache
def built(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], torch.Tensor]:
    """A tiny model, its inputs and eager's output, built once per test run."""
    model, inputs = tiny_models.build(name, SEQ)
    return model, inputs, eager(model, inputs)


@functools.cache
def compiled(name: str) -> emmy.api.CompiledModule:
    """A tiny model compiled by emmy.compile for the emulator, once per test run."""
    model, inputs, _ = built(name)
    return emmy.compile(model, *inputs, device=EmuDevice(), db="none")


#: the models both APIs are checked on here (the vision, diffusion and MoE sets have
#: tests of their own)
MODELS = [*tiny_models.SETS["transformers"], "conv_net"]


def matches_at_each_call(name: str, run) -> None:
    """`run(*inputs)` against eager at each call (tests/calls.py)."""
    model, inputs, _ = built(name)
    for call, (args, _) in enumerate(each_call(inputs)):
        with torch.no_grad():
            error = relative_error(run(*args), eager(model, args))
        assert error <= MODEL_TOLERANCES[torch.float32][0], (
            f"{name}, call {call + 1}: relative error {error:.3g}"
        )


@pytest.mark.parametrize("name", MODELS)
def test_emmy_compile_matches_eager(name: str) -> None:
    matches_at_each_call(name, compiled(name))


@pytest.mark.parametrize("name", MODELS)
def test_torch_compile_matches_eager(name: str) -> None:
    model, _, _ = built(name)
    torch._dynamo.reset()  # each model compiles afresh, not against another's guards
    matches_at_each_call(name, torch.compile(model, backend="emmy"))


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_every_op_of_a_transformer_runs_in_emmy_kernels(name: str) -> None:
    program = compiled(name).program
    fell_back = [
        f"{f['target']} ({f['reason']}) at {f['source']}" for f in program.fallbacks.values()
    ]
    assert not fell_back, f"{name}: " + "; ".join(fell_back)
    # and none is left out: each runs in a kernel or is computed at compile time
    coverage = program.coverage
    assert coverage["native_ops"] + coverage["folded_ops"] == coverage["ops"]


def test_bf16_llama_matches_eager_within_its_tolerance() -> None:
    model, inputs = tiny_models.build("llama", SEQ, dtype="bf16")
    compiled = emmy.compile(model, *inputs, device=EmuDevice(), db="none")
    for call, (args, _) in enumerate(each_call(inputs)):
        actual = compiled(*args)
        assert actual.dtype == torch.bfloat16
        error = relative_error(actual, eager(model, args))
        assert error <= MODEL_TOLERANCES[torch.bfloat16][0], f"call {call + 1}: {error:.3g}"


# -- a model directory -------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny Llama saved with save_pretrained: config.json and model.safetensors."""
    directory = tmp_path_factory.mktemp("tiny-llama")
    tiny_models.hf_model("llama").save_pretrained(directory)
    return directory


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_saved_model_directory_compiles_and_runs_on_emu(capsys, model_dir: Path) -> None:
    assert (model_dir / "model.safetensors").exists()
    size = ("--dim", f"seq={SEQ}")
    code, out, err = run_cli(capsys, "compile", str(model_dir), *size, "--target", "emu")
    assert code == 0, err
    assert "model.safetensors" in err and f"batch 2, seq {SEQ}, f32" in err
    assert "compiled for emu" in out
    # a warm compile reads the directory's graph and program from the caches: no torch, no
    # transformers
    script = (
        "import sys\n"
        "from emmy.cli import main\n"
        f"assert main(['compile', {str(model_dir)!r}, '--dim', 'seq={SEQ}', '--target', 'emu']) == 0\n"
        "assert not {'torch', 'transformers'} & set(sys.modules), 'torch or transformers imported'"
    )
    warm = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert warm.returncode == 0, warm.stderr[-2000:]
    code, out, err = run_cli(capsys, "run", str(model_dir), *size, "--device", "emu", "--check")
    assert code == 0, out + err
    assert "output 0: OK: matches torch eager" in out


def test_a_config_alone_gets_random_weights(capsys, tmp_path: Path) -> None:
    tiny_models.hf_config("gpt2").save_pretrained(tmp_path)
    code, out, err = run_cli(
        capsys,
        "compile",
        str(tmp_path),
        "--dim",
        f"seq={SEQ}",
        "--set",
        "n_layer=1",
        "--target",
        "emu",
    )
    assert code == 0, err
    assert "random weights (seed 0)" in err and "n_layer=1" in err


def _broken(tmp_path: Path, model_dir: Path, what: str) -> Path:
    """A copy of the model directory with one thing wrong."""
    config = (model_dir / "config.json").read_text()
    weights = (model_dir / "model.safetensors").read_bytes()
    if what == "no config":
        (tmp_path / "model.safetensors").write_bytes(weights)
    elif what == "unknown model type":
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "nosuchmodel"}))
    elif what == "config not json":
        (tmp_path / "config.json").write_text('{\n  "model_type": \n')
    elif what == "truncated weights":
        (tmp_path / "config.json").write_text(config)
        (tmp_path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    elif what == "not safetensors":
        (tmp_path / "config.json").write_text(config)
        (tmp_path / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0not json at all!")
    return tmp_path


@pytest.mark.parametrize(
    "what, message",
    [
        ("no config", "config.json: no such file"),
        ("unknown model type", "config.json: unknown model_type 'nosuchmodel'"),
        ("config not json", "config.json:3: not JSON: Expecting value"),
        ("truncated weights", "model.safetensors: tensor"),
        ("not safetensors", "model.safetensors: not a safetensors file (its header is not JSON)"),
    ],
)
def test_a_bad_model_directory_is_one_line_naming_the_file(
    capsys, tmp_path: Path, model_dir: Path, what: str, message: str
) -> None:
    directory = _broken(tmp_path, model_dir, what)
    for command in ("compile", "run"):
        code, out, err = run_cli(capsys, command, str(directory), "--dim", f"seq={SEQ}")
        assert code == 2
        (line,) = err.strip().splitlines()[-1:]
        assert line.startswith("emmy: error: ") and message in line, err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    "options, message",
    [
        (["--dim", "seq=65"], "seq 65 is longer than the 64 positions"),
        (["--set", "no_such_field=1"], "--set no_such_field: llama configs have no field"),
        (["--dim", "beam=2"], "--dim beam: a model directory's dims are batch, seq"),
        (["--config", "tiny"], "--config and --size choose a recipe's config"),
    ],
)
def test_bad_options_for_a_model_directory_are_one_line(
    capsys, model_dir: Path, options: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "compile", str(model_dir), *options)
    assert code == 2
    assert message in err.strip().splitlines()[-1], err


def test_a_model_directory_without_transformers_says_so(tmp_path: Path) -> None:
    tiny_models.hf_config("bert").save_pretrained(tmp_path)
    script = (
        "import sys; sys.modules['transformers'] = None\n"
        "from emmy.cli import main\n"
        f"sys.exit(main(['compile', {str(tmp_path)!r}, '--dim', 'seq=3']))"
    )
    # a cache of its own: a graph cached before compiles without transformers
    env = {**os.environ, "EMMY_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "emmy: error: a model directory needs transformers, which is not installed "
        "(pip install -e '.[test]' brings it)"
    )


def test_a_recipe_compile_does_not_import_transformers() -> None:
    script = (
        "import sys\n"
        "from emmy.cli import main\n"
        "main(['compile', 'mlp', '--config', 'tiny', '--target', 'emu'])\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_gpt2s_mlp_is_one_matmul_with_gelu_new_as_its_epilogue() -> None:
    """transformers' Conv1D views addmm's product as [batch, seq, n], and gelu_new reads it
    three times: merge-reshapes and fuse-graph make the bias add and gelu_new the matmul's
    epilogue, not an elementwise kernel of their own."""
    kernels = list(compiled("gpt2").program.kernels.values())
    assert any(k.site.family == "matmul" and "tanh" in str(k.site.key) for k in kernels), kernels
    assert not any(k.site.family == "elementwise" and "tanh" in str(k.site.key) for k in kernels), (
        kernels
    )
