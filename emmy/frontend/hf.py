"""A local Hugging Face model directory as a model to compile: its `config.json`, and its
safetensors weights where it has them, else random weights from the config (seed 0).
Nothing is downloaded: the Hub is offline (`HF_HUB_OFFLINE=1`) and files are read with
`local_files_only`.

The model is called as `model(input_ids, attention_mask)` and its first output is what is
compiled: the logits of a language model, the last hidden state of a bare encoder. Its
example inputs are `batch` rows of `seq` token ids drawn with seed 0 and an
`attention_mask` whose second row is shorter (its last quarter padded), as a batch of
prompts of different lengths is.

`transformers` is a dependency of the `test` extra, imported only when a model directory is
given; the graph of a directory is cached like a recipe's, so a warm `emmy compile DIR`
imports neither torch nor transformers.

    case = resolve(Path("tiny-llama"), {"seq": 16}, dtype=None, overrides={})
    model, inputs = build(case)             # random weights unless the folder has some
    text, constants = graph_text(case)      # the exported graph, cached
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.base.paths import cache_dir
from emmy.frontend.cache import cached_export, frontend_stamp

CONFIG = "config.json"
#: the example inputs' dims, and the dims `--dim NAME=N` may set
DEFAULT_SIZE = {"batch": 2, "seq": 32}
#: config.json's dtype (`dtype`, or `torch_dtype` before transformers 5) → emmy's name
_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
#: the code that builds a directory's model and inputs: what its cached graph depends on
_SOURCES = (Path(__file__), Path(__file__).with_name("hf_model.py"))
#: bytes of a safetensors file before its JSON header: the header's length, little-endian
_HEADER_LENGTH = 8


def is_model_dir(name: str) -> bool:
    """Whether a command's RECIPE|DIR names a model directory: a folder with a
    config.json, or any folder that is not a recipe's."""
    path = Path(name)
    return (path / CONFIG).is_file() or (path.is_dir() and not (path / "recipe.py").exists())


@dataclass(frozen=True)
class ModelDir:
    """A model directory at one example size and dtype, with fields of its config.json
    overridden (`--set`)."""

    directory: Path
    config_text: str
    model_type: str
    size: dict[str, int]
    dtype: str
    overrides: dict[str, object] = field(default_factory=dict)
    weights: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return self.directory.name

    def describe(self) -> str:
        size = ", ".join(f"{k} {v}" for k, v in self.size.items())
        weights = ", ".join(p.name for p in self.weights) or "random weights (seed 0)"
        overrides = "".join(f", {k}={v}" for k, v in self.overrides.items())
        return f"{self.directory} [{self.model_type}{overrides}, {size}, {self.dtype}, {weights}]"


def resolve(
    directory: Path,
    dims: Mapping[str, int],
    dtype: str | None,
    overrides: Mapping[str, object],
) -> ModelDir:
    """A model directory checked without importing transformers: its config.json read,
    its safetensors files' headers read, `dims` (batch, seq) and the dtype checked."""
    path = directory / CONFIG
    if not path.is_file():
        raise EmmyError(f"{path}: no such file (a Hugging Face model directory has one)")
    text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise EmmyError(f"{path}:{error.lineno}: not JSON: {error.msg}") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str):
        raise EmmyError(f"{path}: names no model_type")
    for dim, value in dims.items():
        if dim not in DEFAULT_SIZE:
            raise EmmyError(f"--dim {dim}: a model directory's dims are {', '.join(DEFAULT_SIZE)}")
        if value < 1:
            raise EmmyError(f"--dim {dim}={value}: must be 1 or more")
    named = config.get("dtype") or config.get("torch_dtype")
    chosen = dtype or (_DTYPES.get(named, "f32") if isinstance(named, str) else "f32")
    if not dtypes.is_float(chosen):
        raise EmmyError(f"dtype must be one of {', '.join(dtypes.FLOAT_NAMES)}, not {chosen!r}")
    weights = tuple(sorted(directory.glob("*.safetensors")))
    for file in weights:
        _check_safetensors(file)
    size = {**DEFAULT_SIZE, **dims}
    return ModelDir(directory, text, model_type, size, chosen, dict(overrides), weights)


def _check_safetensors(path: Path) -> None:
    """A safetensors file's header: its length, its JSON and the tensors' extents, which
    must lie within the file (a truncated or corrupt file is named before torch reads it)."""
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(_HEADER_LENGTH)
        if len(head) < _HEADER_LENGTH:
            raise EmmyError(f"{path}: not a safetensors file (shorter than its header)")
        (length,) = struct.unpack("<Q", head)
        if length > size - _HEADER_LENGTH:
            raise EmmyError(f"{path}: not a safetensors file (its header runs past the end)")
        try:
            header = json.loads(file.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EmmyError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise EmmyError(f"{path}: not a safetensors file (its header is not a table)")
    data = size - _HEADER_LENGTH - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and offsets[1] <= data):
            raise EmmyError(f"{path}: tensor {name!r} lies outside the file (truncated?)")


def transformers_module() -> ModuleType:
    """The transformers package, offline; a one-line error where it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
    try:
        # transformers (seconds to import, a test extra) is needed by a model directory only
        from emmy.frontend import packages

        transformers = packages.transformers()
    except ImportError:
        raise EmmyError(
            "a model directory needs transformers, which is not installed "
            "(pip install -e '.[test]' brings it)"
        ) from None
    # a tiny config's warnings (token ids outside its vocabulary) and the loading bars are
    # not the compile's output
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def load_config(case: ModelDir):
    """The transformers config of the directory, with its overrides and no KV cache."""
    transformers = transformers_module()
    path = case.directory / CONFIG
    if case.model_type not in transformers.CONFIG_MAPPING:
        raise EmmyError(
            f"{path}: unknown model_type {case.model_type!r} "
            f"(transformers {transformers.__version__} has no such model)"
        )
    try:
        config = transformers.AutoConfig.from_pretrained(
            case.directory, local_files_only=True, **case.overrides
        )
    except (ValueError, TypeError, KeyError, OSError) as error:
        raise EmmyError(f"{path}: {_first_line(error)}") from None
    for name in case.overrides:
        if not hasattr(config, name):
            raise EmmyError(f"--set {name}: {case.model_type} configs have no field {name!r}")
    config.use_cache = False  # the compiled graph is one forward pass, without a KV cache
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and case.size["seq"] > positions:
        raise EmmyError(
            f"seq {case.size['seq']} is longer than the {positions} positions {path} allows "
            "(set it with --dim seq=N)"
        )
    return config


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def model_class(config) -> type:
    """The class config.json's `architectures` names, else the causal language model of
    the model type, else its bare model."""
    transformers = transformers_module()
    for name in getattr(config, "architectures", None) or ():
        if hasattr(transformers, name):
            return getattr(transformers, name)
    # the mapping of model types to causal LMs, which transformers does not export at its top
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


def build(case: ModelDir, shapes_only: bool = False):
    """The model (eval mode, in the case's dtype) and its example inputs. Its weights are
    the directory's, else random from seed 0; with `shapes_only`, uninitialised (enough to
    export and compile)."""
    # torch builds the model; a directory's cached graph does without it
    import torch

    from emmy.frontend.hf_model import FirstOutput, example_inputs

    config = load_config(case)
    cls = model_class(config)
    dtype = dtypes.torch_dtype(case.dtype)
    torch.manual_seed(0)
    if shapes_only:
        with torch.device("meta"):
            model = _random_model(cls, config)
        model = model.to_empty(device="cpu")
    elif case.weights:
        model = _from_pretrained(cls, case, config, dtype)
    else:
        model = _random_model(cls, config)
    return FirstOutput(model.to(dtype).eval()), example_inputs(config.vocab_size, case.size)


def _random_model(cls: type, config):
    """A model of `config` with random weights: an Auto class builds its model type's."""
    if hasattr(cls, "from_config"):
        return cls.from_config(config)
    return cls(config)


def _from_pretrained(cls: type, case: ModelDir, config, dtype):
    where = case.weights[0] if len(case.weights) == 1 else case.directory
    try:
        return cls.from_pretrained(
            case.directory, config=config, dtype=dtype, local_files_only=True
        )
    except Exception as error:  # noqa: BLE001 - any reason transformers cannot read the weights
        raise EmmyError(f"{where}: cannot load the weights: {_first_line(error)}") from None


def _cache_path(case: ModelDir) -> Path:
    try:
        transformers_version = version("transformers")
    except PackageNotFoundError:
        transformers_version = "none"
    text = "\0".join(
        (
            "hf-v1",
            *(path.read_text() for path in _SOURCES),
            case.config_text,
            json.dumps([case.overrides, case.size, case.dtype], sort_keys=True),
            transformers_version,
            frontend_stamp(),
        )
    )
    return cache_dir() / "frontend" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def graph_text(case: ModelDir, timings: dict | None = None) -> tuple[str, list[str]]:
    """The graph of a model directory as text and the names of its constants: from the
    cache, or exported with torch (then cached); `timings` gets the export's stages."""
    return cached_export(_cache_path(case), lambda: build(case, shapes_only=True), timings)
