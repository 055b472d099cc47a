"""The campaign file: one plain JSON file that lists the bench work of a campaign.

    {"format": "emmy-campaign", "schema": 1,
     "flags": "",                      # the regime's code-generation flags ("": deployable)
     "output": "gpt2.out",             # the merged freeze's folder, relative to the file
     "devices": ["emu"],               # the device kinds of an item that names none
     "items": [
      {"family": "softmax", "key": "rows=8,cols=64,T=f32", "configs": {"sample": 12},
       "inputs": [[[8, 64], "f32"]], "outputs": [[[8, 64], "f32"]], "from": "torch.softmax(...)"},
      {"family": "attention_path", "key": "...", "configs": "all", "paths": {"fused": [...]}}
     ]}

An item is one site: a kernel family's (family, key, the shapes and storage types of its
buffers, the forks its compile pinned) or a host-level choice's (family, key, and each
option's kernels as `paths`, as a program lists them). Its `configs` say what to measure
there, as `emmy run --bench` would: "default" (the declared default), "all" (every valid
config), {"sample": N} (the default and N valid configs drawn with a seed of the site),
{"sweep": [FORK, ...]} (every value of those forks around the default), or a list of
configs. `devices` are device identities ("emu", "nvidia-h200-sm90"). A *cell* is one
config of an item on one device kind: a row of the output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, is_well_formed
from emmy.base.paths import write_atomic
from emmy.base.problem_key import SiteRef
from emmy.base.regime import regime_for
from emmy.campaign import DEFAULT_MAX_ROWS
from emmy.compiler import TensorSpec
from emmy.dataset.dataset_store import Cell, cell
from emmy.dsl.keys import active_params, complete_key, param_dtype
from emmy.dsl.library import declaration, declarations
from emmy.families.family import ChoiceFamily, HostCallFamily
from emmy.families.registry import FAMILIES, registered_as
from emmy.measure.bench import BenchOptions, SiteWork, requested_configs
from emmy.program import Choice, PathCall, site_json
from emmy.recall.tuning_db import canonical_config
from emmy.sites.fork_space import ForkSpace

CAMPAIGN_FORMAT = "emmy-campaign"
CAMPAIGN_SCHEMA = 1

_TOP_FIELDS = {"format", "schema", "flags", "output", "devices", "items"}
_ITEM_FIELDS = {
    "family", "key", "configs", "devices", "inputs", "outputs", "pinned", "paths", "from",
    "max_rows",
}  # fmt: skip
_REQUIRED_ITEM_FIELDS = ("family", "key", "configs")
_CALL_FIELDS = {"family", "key", "config", "inputs", "outputs"}


@dataclass(frozen=True)
class Item:
    """One site of a campaign and what to measure there."""

    site: SiteRef
    configs: Any  # "default" | "all" | {"sample": N} | {"sweep": [...]} | [config, ...]
    devices: tuple[str, ...]
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    pinned: dict[str, int | str] = field(default_factory=dict)
    paths: dict[str, list[dict]] | None = None  # a choice's options and their kernels
    source: str | None = None  # what the plan made it from ("from")
    max_rows: int = DEFAULT_MAX_ROWS

    @property
    def is_choice(self) -> bool:
        return self.paths is not None

    def describe(self) -> str:
        return f"{self.site.family} {self.site.key}"

    def work(self) -> SiteWork:
        """The site as the bench measures it; its pick, the declared default (moved by the
        constraints) with the pins."""
        decl = declarations().get(self.site.family)
        default = None if decl is None else ForkSpace.of(decl).default_config(self.site.values)
        pick = {**(default or {}), **self.pinned}
        return SiteWork(
            self.site.family, self.site, pick, list(self.inputs), list(self.outputs),
            frozenset(self.pinned),
        )  # fmt: skip

    def choice(self) -> Choice:
        """The item as a program's host-level choice (Bench.bench_choice reads it)."""
        assert self.paths is not None
        ((fork_name, options),) = registered_as(self.site.family, ChoiceFamily).forks.items()
        # the declared default: the first of the family's options this site has
        declared = next((o for o in options if o in self.paths), next(iter(self.paths)))
        default = self.pinned.get(fork_name, declared)
        paths = {o: tuple(PathCall.from_json(c) for c in calls) for o, calls in self.paths.items()}
        return Choice(self.site, {fork_name: default}, paths)

    def wanted_configs(self) -> list[dict[str, int | str]]:
        """The configs this item measures on every device kind, in the bench's order."""
        return [dict(c) for c in self._wanted]

    @cached_property
    def _wanted(self) -> tuple[dict[str, int | str], ...]:
        # computed once: a check, each device kind's cells and the driver all ask
        if self.is_choice:
            return tuple(_choice_configs(self))
        if isinstance(self.configs, list):
            return tuple(dict(c) for c in self.configs)
        options = BenchOptions(max_rows=self.max_rows)
        if self.configs == "all":
            options.sweep = ["all"]
        elif isinstance(self.configs, dict) and "sample" in self.configs:
            options.sample = options.max_rows = self.configs["sample"]
        elif isinstance(self.configs, dict):
            options.sweep = list(self.configs["sweep"])
        return tuple(requested_configs(self.work(), options))

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {**site_json(self.site), "configs": self.configs}
        record["devices"] = list(self.devices)
        if self.inputs or self.outputs:
            record["inputs"] = [[list(s.shape), s.dtype] for s in self.inputs]
            record["outputs"] = [[list(s.shape), s.dtype] for s in self.outputs]
        if self.pinned:
            record["pinned"] = self.pinned
        if self.paths is not None:
            record["paths"] = self.paths
        if self.max_rows != DEFAULT_MAX_ROWS:
            record["max_rows"] = self.max_rows
        if self.source:
            record["from"] = self.source
        return record


def _choice_configs(item: Item) -> list[dict[str, int | str]]:
    choice = item.choice()
    (fork_name,) = choice.config
    swept = isinstance(item.configs, dict) and fork_name in item.configs.get("sweep", ())
    if item.configs == "all" or swept:
        options = list(item.paths or {})
    elif isinstance(item.configs, list):
        options = [c.get(fork_name) for c in item.configs]
    else:  # the default; a sample draws configs of kernels, as `emmy run --bench` does
        options = [choice.config[fork_name]]
    return [{fork_name: o} for o in dict.fromkeys(options)]


@dataclass(frozen=True)
class Campaign:
    """A campaign file, read and checked whole."""

    path: Path
    items: tuple[Item, ...]
    flags: str = ""
    devices: tuple[str, ...] = (EMU,)
    output_name: str | None = None

    @property
    def output(self) -> Path:
        """The folder of the campaign's merged freeze: `output` beside the file, or
        `<file name without .json>.out`."""
        name = self.output_name or f"{self.path.name.removesuffix('.json')}.out"
        return self.path.parent / name

    def device_kinds(self) -> list[str]:
        return list(dict.fromkeys(d for item in self.items for d in item.devices))

    def cells(self, item: Item, device: str) -> list[tuple[Cell, dict]]:
        """The cells of an item on a device kind, with their configs."""
        regime = regime_for(device, self.flags).id
        site = item.site
        return [
            (cell(device, regime, site.family, str(site.key), c), c) for c in item.wanted_configs()
        ]

    def iter_cells(self, devices: Sequence[str]) -> Iterator[tuple[int, str, list]]:
        """(item index, device, its cells) of every item on each of `devices` it wants."""
        for index, item in enumerate(self.items):
            for device in item.devices:
                if device in devices:
                    yield index, device, self.cells(item, device)

    def to_json(self) -> str:
        """The file's text: one item a line, so that a diff shows which items changed."""
        head = {
            "format": CAMPAIGN_FORMAT,
            "schema": CAMPAIGN_SCHEMA,
            "flags": self.flags,
            "devices": list(self.devices),
        }
        if self.output_name:
            head["output"] = self.output_name
        lines = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
        items = ",\n".join(f"    {json.dumps(item.to_json())}" for item in self.items)
        return "{\n" + "\n".join(lines) + '\n  "items": [\n' + items + "\n  ]\n}\n"

    def write(self) -> None:
        write_atomic(self.path, self.to_json().encode())


# --- reading and checking -------------------------------------------------------------------


def load_campaign(path: Path | str) -> Campaign:
    """The campaign file at `path`, checked whole; an EmmyError of one line naming the
    file, the entry and what is wrong otherwise."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise EmmyError(f"{path}: cannot read the campaign file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise EmmyError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise EmmyError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise EmmyError(f"{path}: a campaign file is a JSON object")
    if data.get("format") != CAMPAIGN_FORMAT:
        raise EmmyError(f"{path}: not an emmy campaign (format {data.get('format')!r})")
    if data.get("schema") != CAMPAIGN_SCHEMA:
        raise EmmyError(
            f"{path}: schema {data.get('schema')!r} is not one this emmy reads"
            f" (campaign schema {CAMPAIGN_SCHEMA})"
        )
    unknown = sorted(set(data) - _TOP_FIELDS)
    if unknown:
        raise EmmyError(f"{path}: unknown field {unknown[0]!r}")
    flags = data.get("flags", "")
    if not isinstance(flags, str):
        raise EmmyError(f"{path}: flags must be a string of code-generation flags")
    output = data.get("output")
    if output is not None and (not isinstance(output, str) or not output):
        raise EmmyError(f"{path}: output must be a folder name")
    devices = _devices(f"{path}: devices", data.get("devices", [EMU]))
    items = data.get("items")
    if not isinstance(items, list):
        raise EmmyError(f"{path}: items must be a list")
    checked = tuple(_item(f"{path}: item {i}", record, devices) for i, record in enumerate(items))
    return Campaign(path, checked, flags, devices, output)


def _devices(where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(d, str) for d in value):
        raise EmmyError(f"{where} must be a non-empty list of device identities")
    for device in value:
        if not is_well_formed(device):
            raise EmmyError(
                f"{where}: {device!r} is not a device identity (emu, or a slug such as "
                "nvidia-h200-sm90)"
            )
    return tuple(dict.fromkeys(value))


def _item(where: str, record: object, devices: tuple[str, ...]) -> Item:
    if not isinstance(record, dict):
        raise EmmyError(f"{where}: an item is a JSON object, not {type(record).__name__}")
    for name in _REQUIRED_ITEM_FIELDS:
        if name not in record:
            raise EmmyError(f"{where}: missing field {name!r}")
    unknown = sorted(set(record) - _ITEM_FIELDS)
    if unknown:
        raise EmmyError(f"{where}: unknown field {unknown[0]!r}")
    name, key = record["family"], record["key"]
    if not isinstance(name, str) or not isinstance(key, str):
        raise EmmyError(f"{where}: family and key must be strings")
    where = f"{where} ({name})"
    entry = FAMILIES.get(name)
    if entry is None or isinstance(entry, HostCallFamily):
        kinds = "a kernel family or a host-level choice"
        raise EmmyError(f"{where}: unknown family {name!r} (want {kinds}, e.g. softmax)")
    try:
        site = SiteRef.parse(name, key)
    except EmmyError as error:
        raise EmmyError(f"{where}: {error}") from None
    max_rows = record.get("max_rows", DEFAULT_MAX_ROWS)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise EmmyError(f"{where}: max_rows must be a count (0 or more)")
    pinned = record.get("pinned", {})
    if not isinstance(pinned, dict):
        raise EmmyError(f"{where}: pinned must be an object of fork: value")
    source = record.get("from")
    if source is not None and not isinstance(source, str):
        raise EmmyError(f"{where}: from must be a string")
    item = Item(
        site=site,
        configs=_configs_spec(where, record["configs"]),
        devices=_devices(f"{where}: devices", record.get("devices", list(devices))),
        pinned=pinned,
        source=source,
        max_rows=max_rows,
    )
    if isinstance(entry, ChoiceFamily):
        item = _with_paths(where, item, record.get("paths"))
    else:
        if "paths" in record:
            raise EmmyError(f"{where}: paths belong to a host-level choice, not a kernel family")
        item = _with_buffers(where, item, record)
    try:
        configs = item.wanted_configs()
    except EmmyError as error:
        raise EmmyError(f"{where}: {error}") from None
    _check_listed(where, item, configs)
    return item


def _configs_spec(where: str, spec: object) -> object:
    if spec in ("default", "all"):
        return spec
    if isinstance(spec, dict) and set(spec) == {"sample"}:
        count = spec["sample"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise EmmyError(f"{where}: configs sample must be a count of 1 or more")
        return spec
    if isinstance(spec, dict) and set(spec) == {"sweep"}:
        forks = spec["sweep"]
        if not isinstance(forks, list) or not forks or not all(isinstance(f, str) for f in forks):
            raise EmmyError(f"{where}: configs sweep must be a non-empty list of fork names")
        return spec
    if isinstance(spec, list) and spec and all(isinstance(c, dict) for c in spec):
        return spec
    raise EmmyError(
        f'{where}: configs {json.dumps(spec)} is not one of "default", "all", '
        '{"sample": N}, {"sweep": [FORK, ...]} or a list of configs'
    )


def _specs(where: str, value: object) -> tuple[TensorSpec, ...]:
    if not isinstance(value, list):
        raise EmmyError(f"{where} must be a list of [shape, dtype]")
    specs = []
    for i, spec in enumerate(value):
        shape, dtype = spec if isinstance(spec, list) and len(spec) == 2 else (None, None)
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise EmmyError(f"{where}[{i}]: expected [shape, dtype], a shape of sizes")
        if not dtypes.is_storage(dtype):
            raise EmmyError(f"{where}[{i}]: {dtype!r} is not a storage type")
        specs.append(TensorSpec(f"b{i}", tuple(shape), dtype))
    return tuple(specs)


def _with_buffers(where: str, item: Item, record: dict) -> Item:
    """A kernel item with its buffers' specs: the file's, or those its family declares."""
    if ("inputs" in record) != ("outputs" in record):
        raise EmmyError(f"{where}: give both inputs and outputs, or neither")
    if "inputs" in record:
        inputs = _specs(f"{where}: inputs", record["inputs"])
        outputs = _specs(f"{where}: outputs", record["outputs"])
    else:
        inputs, outputs = _declared_specs(where, item.site.family, item.site.values)
    return replace(item, inputs=inputs, outputs=outputs)


def _declared_specs(
    where: str, family_name: str, key: dict[str, int | str]
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The buffers a family declares at a key, where every parameter has a shape of its
    own (not a variadic one, whose shapes depend on how each input is read)."""
    decl = declaration(family_name)
    values = complete_key(decl, key)
    specs: dict[str, list[TensorSpec]] = {"in": [], "out": []}
    for param in active_params(decl, values):
        if param.variadic:
            raise EmmyError(
                f"{where}: {family_name} reads a chain's inputs, whose shapes its key does not "
                "give: give the item's inputs and outputs (a plan writes them)"
            )
        try:
            shape = param.shape(values)
        except (KeyError, ValueError):
            raise EmmyError(f"{where}: the key does not give every dim of {param.name}") from None
        specs[param.direction].append(TensorSpec(param.name, shape, param_dtype(param, values)))
    return tuple(specs["in"]), tuple(specs["out"])


def _with_paths(where: str, item: Item, paths: object) -> Item:
    if not isinstance(paths, dict) or not paths:
        raise EmmyError(f"{where}: a host-level choice needs its paths (option: [kernels])")
    for option, calls in paths.items():
        if not isinstance(calls, list) or not calls:
            raise EmmyError(f"{where}: path {option!r} must be a non-empty list of kernels")
        for i, call in enumerate(calls):
            if not isinstance(call, dict) or set(call) != _CALL_FIELDS:
                fields = ", ".join(sorted(_CALL_FIELDS))
                raise EmmyError(f"{where}: path {option!r} kernel {i} must have {fields}")
            if call["family"] not in FAMILIES:
                raise EmmyError(f"{where}: path {option!r}: unknown family {call['family']!r}")
    return replace(item, paths=paths)


def _check_listed(where: str, item: Item, configs: list[dict]) -> None:
    """Every listed config is valid at the item's key, and every swept fork is a fork."""
    if item.is_choice:
        (fork_name,) = registered_as(item.site.family, ChoiceFamily).forks
        for config in item.configs if isinstance(item.configs, list) else configs:
            if set(config) != {fork_name} or config[fork_name] not in (item.paths or {}):
                options = ", ".join(item.paths or {})
                raise EmmyError(f"{where}: {config} is not one of the paths ({options})")
        return
    space = ForkSpace.of(declaration(item.site.family))
    forks = set(space.names)
    if isinstance(item.configs, dict) and "sweep" in item.configs:
        unknown = sorted(set(item.configs["sweep"]) - forks)
        if unknown:
            raise EmmyError(
                f"{where}: no fork named {unknown[0]!r} (forks: {', '.join(sorted(forks))})"
            )
    if isinstance(item.configs, list):
        valid = {canonical_config(c) for c in space.configs(item.site.values)}
        for config in configs:
            if canonical_config(config) not in valid:
                raise EmmyError(f"{where}: {canonical_config(config)} is not a valid config here")
