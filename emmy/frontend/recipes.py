"""Recipes: `recipes/<model>/recipe.py` builds a model from a named config with random
weights (seeded, nothing downloaded) and gives example inputs at a few sizes.

A recipe module defines CONFIGS (name → dict, each with a "dtype": f32, f16 or bf16),
SIZES (config name → list of size dicts), DEFAULT (a config name), `build(config)` and
`example_inputs(config, size)`. The graph of a recipe at a config and size is cached with
the names of its constants, so a warm `emmy compile RECIPE` does not import torch.

A recipe with a decode program also defines DECODE (config name → {"max_len": the cache's
length}), `decoder(model, config)` (a module over the model's own weights taking ids
[batch, new], the position they start at (int64 [1]) and the caches, writing the new keys
and values into the caches in place and returning the last token's logits) and
`cache_shapes(config, batch, max_len)` (the caches' shapes, in the order it takes them).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.base.paths import RECIPES_DIR, cache_dir
from emmy.frontend.cache import cached_export, frontend_stamp


def recipe_dir(name: str) -> Path:
    """A recipe by name (a folder of recipes/) or by the path of its folder."""
    path = Path(name)
    if not (path / "recipe.py").exists():
        path = RECIPES_DIR / name
    if not (path / "recipe.py").exists():
        raise EmmyError(f"no recipe {name!r}; known: {', '.join(recipe_names()) or 'none'}")
    return path


def recipe_names() -> list[str]:
    """The recipes of recipes/, by name, sorted."""
    return sorted(p.parent.name for p in RECIPES_DIR.glob("*/recipe.py"))


def config_names(name: str) -> list[str]:
    """A recipe's configs that have example sizes (a config without is built at a size
    its user gives), by name, in its CONFIGS order."""
    constants = _constants_of_source(recipe_dir(name))
    return [config for config in constants["CONFIGS"] if constants["SIZES"].get(config)]


@dataclass(frozen=True)
class RecipeCase:
    """One model of a recipe: a config by name, one of its sizes, a dtype."""

    name: str
    directory: Path
    config_name: str
    config: dict
    size: dict
    dtype: str

    def describe(self) -> str:
        size = ", ".join(f"{k} {v}" for k, v in self.size.items())
        return f"{self.name} [{self.config_name}, {size}, {self.dtype}]"


_REQUIRED = ("CONFIGS", "SIZES", "DEFAULT")
_OPTIONAL = ("DYNAMIC", "DECODE")


def _recipe_source(directory: Path) -> str:
    return (directory / "recipe.py").read_text()


def _constants_of_source(directory: Path) -> dict:
    """CONFIGS, SIZES, DEFAULT and the optional DYNAMIC and DECODE, read without running the
    recipe (no torch import)."""
    tree = ast.parse(_recipe_source(directory), str(directory / "recipe.py"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in (*_REQUIRED, *_OPTIONAL):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    raise EmmyError(
                        f"{directory / 'recipe.py'}:{node.lineno}: {target.id} must be a literal"
                    ) from None
    for name in _REQUIRED:
        if name not in found:
            raise EmmyError(f"{directory / 'recipe.py'}: the recipe defines no {name}")
    if not _is_dynamic_table(found.get("DYNAMIC", {})):
        raise EmmyError(
            f"{directory / 'recipe.py'}: DYNAMIC must map a config to {{dim: (low, high)}} with "
            "integers low <= high"
        )
    return found


def resolve_case(
    name: str,
    config: str | None,
    size: int,
    dtype: str | None,
    dims: Mapping[str, int] | None = None,
) -> RecipeCase:
    """A recipe's config at one of its example sizes, with `dims` (e.g. {"seq": 300})
    replacing dims of that size that the recipe declares dynamic in DYNAMIC, within their
    declared ranges."""
    directory = recipe_dir(name)
    constants = _constants_of_source(directory)
    configs, sizes = constants["CONFIGS"], constants["SIZES"]
    config_name = config or constants["DEFAULT"]
    if config_name not in configs:
        raise EmmyError(f"recipe {name} has no config {config_name!r}; known: {', '.join(configs)}")
    choices = sizes.get(config_name, [])
    if not 0 <= size < len(choices):
        raise EmmyError(
            f"recipe {name} config {config_name} has {len(choices)} size(s); --size {size} is out of range"
        )
    chosen_size = dict(choices[size])
    if dims:
        chosen_size |= _dynamic_dims(name, config_name, constants.get("DYNAMIC", {}), dims)
    chosen = dtype or configs[config_name].get("dtype", "f32")
    if not dtypes.is_float(chosen):
        raise EmmyError(f"dtype must be one of {', '.join(dtypes.FLOAT_NAMES)}, not {chosen!r}")
    return RecipeCase(
        directory.name, directory, config_name, configs[config_name], chosen_size, chosen
    )


def _is_dynamic_table(table: object) -> bool:
    if not isinstance(table, dict):
        return False
    for dims in table.values():
        if not isinstance(dims, dict):
            return False
        for bounds in dims.values():
            if not (isinstance(bounds, tuple | list) and len(bounds) == 2):
                return False
            if not all(type(b) is int for b in bounds) or bounds[0] > bounds[1]:
                return False
    return True


def _dynamic_dims(
    name: str, config_name: str, dynamic: Mapping, dims: Mapping[str, int]
) -> dict[str, int]:
    """`dims` checked against the ranges the recipe declares for the config."""
    declared = dynamic.get(config_name, {})
    for dim, value in dims.items():
        if dim not in declared:
            known = ", ".join(declared) or "none"
            raise EmmyError(
                f"recipe {name} config {config_name} declares no dynamic dim {dim!r} "
                f"(its dynamic dims: {known})"
            )
        low, high = declared[dim]
        if not low <= value <= high:
            raise EmmyError(
                f"{dim}={value} is outside recipe {name} config {config_name}'s range "
                f"[{low}, {high}] for {dim}"
            )
    return dict(dims)


@cache
def _load(directory: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"emmy_recipe_{directory.name}", directory / "recipe.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # importable by its name, as a user's model module is: dynamo's guards on a function
    # that calls the model look its class's module up
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build(case: RecipeCase, meta: bool = False):
    """The model (random weights from seed 0, in the case's dtype, eval mode) and its
    example inputs; with `meta`, on the meta device: shapes without values, enough to
    compile."""
    # torch builds the model; reading a recipe's constants or its cached graph does not
    import torch

    recipe = _load(case.directory)
    dtype = dtypes.torch_dtype(case.dtype)
    torch.manual_seed(0)
    with torch.device("meta" if meta else "cpu"):
        model = recipe.build(case.config).to(dtype).eval()
        inputs = tuple(recipe.example_inputs(case.config, case.size))
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs)
    return model, inputs


def decode_case(
    name: str, config: str | None, dtype: str | None, batch: int, max_len: int | None = None
) -> RecipeCase:
    """A recipe's decode program at a config: its size is the batch and the cache's
    max_len (by default the recipe's DECODE's)."""
    directory = recipe_dir(name)
    constants = _constants_of_source(directory)
    config_name = config or constants["DEFAULT"]
    decode = constants.get("DECODE", {})
    if config_name not in decode:
        known = ", ".join(decode) or "none"
        raise EmmyError(
            f"recipe {name} has no decode program for config {config_name!r} (DECODE has: {known})"
        )
    if batch < 1:
        raise EmmyError(f"the batch must be at least 1, not {batch}")
    chosen = dtype or constants["CONFIGS"][config_name].get("dtype", "f32")
    if not dtypes.is_float(chosen):
        raise EmmyError(f"dtype must be one of {', '.join(dtypes.FLOAT_NAMES)}, not {chosen!r}")
    if max_len is not None and max_len < 1:
        raise EmmyError(f"the cache's max_len must be at least 1, not {max_len}")
    size = {"batch": batch, "max_len": max_len or int(decode[config_name]["max_len"])}
    config_dict = constants["CONFIGS"][config_name]
    return RecipeCase(directory.name, directory, config_name, config_dict, size, chosen)


def build_decoder(case: RecipeCase, device: str = "cpu"):
    """A decode case's model (as `build` makes it: the same weights), its decode step over
    the model's modules, and zeroed caches of the case's batch and max_len, on `device`."""
    # torch builds the model, as in build()
    import torch

    recipe = _load(case.directory)
    dtype = dtypes.torch_dtype(case.dtype)
    torch.manual_seed(0)
    with torch.device(device):
        model = recipe.build(case.config).to(dtype).eval()
        shapes = recipe.cache_shapes(case.config, case.size["batch"], case.size["max_len"])
        caches = [torch.zeros(shape, dtype=dtype) for shape in shapes]
    return model, recipe.decoder(model, case.config).eval(), caches


def decode_step_example(case: RecipeCase, meta: bool = False):
    """A decode case's step module and example inputs of one step: one new token per row
    at position 0, and zeroed caches; with `meta`, on the meta device."""
    # torch builds the model, as in build()
    import torch

    device = "meta" if meta else "cpu"
    _, step, caches = build_decoder(case, device)
    ids = torch.zeros((case.size["batch"], 1), dtype=torch.int64, device=device)
    position = torch.zeros(1, dtype=torch.int64, device=device)
    return step, (ids, position, *caches)


def decode_graph_text(case: RecipeCase, timings: dict | None = None) -> tuple[str, list[str]]:
    """The graph of a decode case's step (one new token) as text, and the names of its
    constants, as recipe_graph_text gives a forward's."""
    path = _cache_path(case, "decode-step")
    return cached_export(path, lambda: decode_step_example(case, meta=True), timings)


def _cache_path(case: RecipeCase, program: str = "forward") -> Path:
    text = "\0".join(
        (
            "recipe-v1" if program == "forward" else f"recipe-{program}-v1",
            _recipe_source(case.directory),
            json.dumps([case.config, case.size, case.dtype], sort_keys=True),
            frontend_stamp(),
        )
    )
    return cache_dir() / "frontend" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def recipe_graph_text(case: RecipeCase, timings: dict | None = None) -> tuple[str, list[str]]:
    """The graph of a recipe case as text, and the names of its constants: from the cache,
    or exported with torch (then cached). On an export, `timings` gets the seconds spent
    importing torch and exporting."""
    return cached_export(_cache_path(case), lambda: build(case, meta=True), timings)
