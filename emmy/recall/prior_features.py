"""What the prior sees: the features of (family, problem key, config, device), and the dataset.

This module is the one definition of the features: `emmy fit` trains on them and a compile
evaluates the prior on them, with numpy alone (nothing here imports JAX).

Per family, a `FeatureSpec` fixes the layout (stored in the prior's metadata):

- each integer of the key and of the config as sign(v)·log2(1 + |v|);
- each symbol of the key and of the config one-hot over its vocabulary (a value outside the
  vocabulary is all zeros);
- for every (integer of the key k, integer fork f): log2 ceil(k / f) (blocks, iterations,
  vectors per row), whether f divides k, and log2(ceil(k / f)·f / k) (the padding waste);
- with `fork_pairs` (`emmy fit` keeps, per family, whichever layout validates better), the
  same two logs for k over the product of every two integer forks
  f·g (iterations of a thread over a row of `threads`·`vec`, a tile of `thread_m`·`block_k`):
  the network adds logs well but sees no ceiling of a product;
- the device one-hot over the devices the family was fitted on (the emulator is a device
  like any other).

A *dataset* is what `emmy db export` writes: `manifest.json` and one `<pool>.npz` per pool
(family, device, regime) holding `median_s[key, config]`, NaN where not measured cleanly.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from emmy.base.errors import EmmyError
from emmy.base.problem_key import parse_key

DATASET_SCHEMA = 1
#: a key is held out (never fitted on; what `emmy eval` and the metadata score) when its hash
#: falls below this fraction; the next VALIDATION_FRACTION decides early stopping
HELD_OUT_FRACTION = 0.2
VALIDATION_FRACTION = 0.15
#: symbols of a key beyond this many distinct values (e.g. elementwise chains) keep only the
#: most frequent ones
MAX_VOCABULARY = 32
#: manifest fields that say when and from where a dataset was exported, not what it holds
VOLATILE_MANIFEST_FIELDS = ("created", "database")
DATASET_HASH = (
    "sha256 of the manifest as sorted compact JSON without created/database, then per pool"
    " its id, shape and median_s (float64, C order)"
)

Value = int | str


def _log2p(values: np.ndarray) -> np.ndarray:
    return np.sign(values) * np.log2(1.0 + np.abs(values))


def split_of(family: str, key: str) -> str:
    """ "held_out", "validation" or "train": fixed by a hash of (family, problem key), so a key
    lands on the same side on every machine, for every device and every fit."""
    digest = hashlib.sha256(f"{family}\n{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < HELD_OUT_FRACTION:
        return "held_out"
    if u < HELD_OUT_FRACTION + VALIDATION_FRACTION:
        return "validation"
    return "train"


@dataclass(frozen=True)
class FeatureSpec:
    """The feature layout of one family: names, vocabularies, devices."""

    family: str
    key_ints: tuple[str, ...]
    key_symbols: dict[str, tuple[str, ...]]
    fork_ints: tuple[str, ...]
    fork_symbols: dict[str, tuple[str, ...]]
    devices: tuple[str, ...]
    forks: tuple[str, ...] = field(default=())
    fork_pairs: bool = False
    #: the library's defaults of the key's optional names (a canonical key leaves them out)
    key_defaults: dict[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # symbols in name order: the layout must survive a JSON round trip with sorted keys
        for name in ("key_symbols", "fork_symbols"):
            object.__setattr__(self, name, dict(sorted(getattr(self, name).items())))
        if not self.forks:
            object.__setattr__(self, "forks", (*self.fork_ints, *self.fork_symbols))

    @property
    def names(self) -> list[str]:
        names = [f"key:{n}" for n in self.key_ints]
        names += [f"key:{n}={v}" for n, vocab in self.key_symbols.items() for v in vocab]
        names += [f"config:{n}" for n in self.fork_ints]
        names += [f"config:{n}={v}" for n, vocab in self.fork_symbols.items() for v in vocab]
        for k in self.key_ints:
            for f in self.fork_ints:
                names += [f"log2 ceil({k}/{f})", f"{k}%{f}==0", f"log2 pad({k}/{f})"]
        for k in self.key_ints:
            for f, g in self._pairs():
                names += [f"log2 ceil({k}/({f}*{g}))", f"log2 pad({k}/({f}*{g}))"]
        names += [f"device={d}" for d in self.devices]
        return names

    def _pairs(self) -> list[tuple[str, str]]:
        if not self.fork_pairs:
            return []
        ints = self.fork_ints
        return [(f, g) for i, f in enumerate(ints) for g in ints[i + 1 :]]

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def key_names(self) -> list[str]:
        return [*self.key_ints, *self.key_symbols]

    def to_json(self) -> dict:
        return {
            "family": self.family,
            "key_ints": list(self.key_ints),
            "key_symbols": {n: list(v) for n, v in self.key_symbols.items()},
            "fork_ints": list(self.fork_ints),
            "fork_symbols": {n: list(v) for n, v in self.fork_symbols.items()},
            "forks": list(self.forks),
            "devices": list(self.devices),
            "fork_pairs": self.fork_pairs,
            "key_defaults": dict(sorted(self.key_defaults.items())),
            "names": self.names,
        }

    @classmethod
    def from_json(cls, doc: Mapping) -> FeatureSpec:
        spec = cls(
            family=str(doc["family"]),
            key_ints=tuple(doc["key_ints"]),
            key_symbols={str(n): tuple(map(str, v)) for n, v in doc["key_symbols"].items()},
            fork_ints=tuple(doc["fork_ints"]),
            fork_symbols={str(n): tuple(map(str, v)) for n, v in doc["fork_symbols"].items()},
            devices=tuple(doc["devices"]),
            forks=tuple(doc.get("forks", ())),
            fork_pairs=bool(doc.get("fork_pairs", False)),
            key_defaults=dict(doc.get("key_defaults", {})),
        )
        if "names" in doc and list(doc["names"]) != spec.names:
            raise ValueError(f"feature names of {spec.family} do not match their layout")
        return spec

    def accepts(self, key: Mapping[str, Value], config: Mapping[str, Value]) -> bool:
        """Whether a key and a config have the names and kinds this layout was fitted on
        (a library changed since the fit does not). A name the fit never saw, such as a
        matmul's `split`, is taken only at its default, which every key of the fit had."""
        key = self.complete(key)
        if set(config) != set(self.forks) or any(n not in key for n in self.key_names):
            return False
        unseen = set(key) - set(self.key_names)
        if any(n not in self.key_defaults or key[n] != self.key_defaults[n] for n in unseen):
            return False
        ints = [key[n] for n in self.key_ints] + [config[n] for n in self.fork_ints]
        return all(isinstance(v, int) and not isinstance(v, bool) for v in ints)

    # --- the features ----------------------------------------------------------------

    def complete(self, key: Mapping[str, Value]) -> dict[str, Value]:
        """The key with the names it leaves out at their defaults."""
        return {**self.key_defaults, **key}

    def key_block(self, keys: Sequence[Mapping[str, Value]]) -> tuple[np.ndarray, np.ndarray]:
        """Per key: its features [K, n] and its raw integers [K, len(key_ints)]."""
        keys = [self.complete(k) for k in keys]
        ints = np.array([[float(k[n]) for n in self.key_ints] for k in keys], dtype=np.float64)
        ints = ints.reshape(len(keys), len(self.key_ints))
        parts = [_log2p(ints)]
        for name, vocab in self.key_symbols.items():
            parts.append(_one_hot([str(k[name]) for k in keys], vocab))
        return np.concatenate(parts, axis=1), ints

    def config_block(self, configs: Sequence[Mapping[str, Value]]) -> tuple[np.ndarray, np.ndarray]:
        """Per config: its features [C, n] and its raw integers [C, len(fork_ints)]."""
        ints = np.array(
            [[float(c[n]) for n in self.fork_ints] for c in configs], dtype=np.float64
        ).reshape(len(configs), len(self.fork_ints))
        parts = [_log2p(ints)]
        for name, vocab in self.fork_symbols.items():
            parts.append(_one_hot([str(c[name]) for c in configs], vocab))
        return np.concatenate(parts, axis=1), ints

    def matrix(
        self,
        device: str,
        keys: Sequence[Mapping[str, Value]],
        configs: Sequence[Mapping[str, Value]],
    ) -> np.ndarray:
        """The features of every (key, config) on `device`: float64 [K, C, size]."""
        key_features, key_ints = self.key_block(keys)
        config_features, config_ints = self.config_block(configs)
        n_keys, n_configs = len(keys), len(configs)
        k = key_ints[:, None, :, None]  # [K, 1, a, 1]
        ceil_log, divides, pad = _blocks(k, config_ints[None, :, None, :])  # [K, C, a, b]
        pairs = np.stack([ceil_log, divides, pad], axis=-1)  # [K, C, a, b, 3]
        pairs = pairs.reshape(n_keys, n_configs, -1)
        index = {name: i for i, name in enumerate(self.fork_ints)}
        products = [config_ints[:, index[f]] * config_ints[:, index[g]] for f, g in self._pairs()]
        if products:
            ceil_log, _, pad = _blocks(k, np.stack(products, axis=1)[None, :, None, :])
            product_part = np.stack([ceil_log, pad], axis=-1).reshape(n_keys, n_configs, -1)
        else:
            product_part = np.zeros((n_keys, n_configs, 0))
        device_part = np.array([1.0 if d == device else 0.0 for d in self.devices])
        return np.concatenate(
            [
                np.broadcast_to(
                    key_features[:, None, :], (n_keys, n_configs, key_features.shape[1])
                ),
                np.broadcast_to(
                    config_features[None, :, :], (n_keys, n_configs, config_features.shape[1])
                ),
                pairs,
                product_part,
                np.broadcast_to(device_part, (n_keys, n_configs, len(self.devices))),
            ],
            axis=2,
        )

    def key_vector(self, key: Mapping[str, Value]) -> np.ndarray:
        """The features of a key alone (what "nearest key" measures distance in)."""
        return self.key_block([key])[0][0]


def _blocks(k: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log2 ceil(k / f), whether f divides k, and the padding waste log2(ceil(k/f)·f / k), for
    broadcastable integer arrays (0 where f is not positive)."""
    positive = f > 0
    safe_f = np.where(positive, f, 1.0)
    blocks = np.where(positive, np.ceil(np.maximum(k, 0.0) / safe_f), 0.0)
    ceil_log = np.log2(np.maximum(blocks, 1.0))
    divides = (positive & (np.mod(k, safe_f) == 0)).astype(np.float64)
    pad = np.where(
        positive & (k > 0), np.log2(np.maximum(blocks * safe_f, 1.0) / np.maximum(k, 1.0)), 0.0
    )
    return ceil_log, divides, pad


def _one_hot(values: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
    index = {v: i for i, v in enumerate(vocabulary)}
    out = np.zeros((len(values), len(vocabulary)))
    for row, value in enumerate(values):
        column = index.get(value)
        if column is not None:
            out[row, column] = 1.0
    return out


# --- the dataset ------------------------------------------------------------------------


@dataclass
class Pool:
    """One (family, device, regime): median times [keys, configs], NaN where not clean."""

    id: str
    family: str
    device: str
    regime: str
    regime_words: str
    keys: list[str]
    configs: list[str]
    median_s: np.ndarray
    path: Path

    @property
    def parsed_keys(self) -> list[dict[str, Value]]:
        return [parse_key(k) for k in self.keys]

    @property
    def parsed_configs(self) -> list[dict[str, Value]]:
        return [json.loads(c) for c in self.configs]

    @property
    def measured(self) -> np.ndarray:
        return np.isfinite(self.median_s) & (self.median_s > 0)


@dataclass
class Dataset:
    path: Path
    manifest: dict
    pools: list[Pool]
    sha256: str

    @property
    def families(self) -> list[str]:
        return sorted({p.family for p in self.pools})

    def kinds(self, family: str) -> dict[str, dict[str, str]]:
        """The manifest's kinds of the family's key names and forks: "int" or "symbol"."""
        features = self.manifest.get("features", {}).get(family)
        if not isinstance(features, dict) or not {"key", "config"} <= set(features):
            raise EmmyError(f"{self.path / 'manifest.json'}: features of family {family!r} missing")
        return features


def load_dataset(directory: str | Path) -> Dataset:
    """Read a dataset directory whole; EmmyError naming the file at fault."""
    directory = Path(directory)
    manifest_path = directory / "manifest.json"
    try:
        text = manifest_path.read_bytes()
    except OSError as e:
        raise EmmyError(
            f"{manifest_path}: cannot read the dataset manifest ({e.strerror})"
        ) from None
    try:
        manifest = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EmmyError(f"{manifest_path}: not a JSON manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != DATASET_SCHEMA:
        raise EmmyError(f"{manifest_path}: not a dataset manifest of schema {DATASET_SCHEMA}")
    # what was exported, not when or from which file: the same data is the same hash
    content = {k: v for k, v in manifest.items() if k not in VOLATILE_MANIFEST_FIELDS}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())
    pools = []
    for i, raw in enumerate(manifest.get("pools", [])):
        try:
            pool_id, family, device = raw["id"], raw["family"], raw["device"]
            regime, file, keys, configs = raw["regime"], raw["file"], raw["keys"], raw["configs"]
        except (KeyError, TypeError):
            raise EmmyError(
                f"{manifest_path}: pool {i} lacks id/family/device/regime/file/keys/configs"
            ) from None
        path = directory / file
        try:
            with np.load(path, allow_pickle=False) as npz:
                median = np.asarray(npz["median_s"], dtype=np.float64)
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
            raise EmmyError(f"{path}: not a pool matrix with median_s ({e})") from None
        if median.shape != (len(keys), len(configs)):
            raise EmmyError(
                f"{path}: median_s is {median.shape}, the manifest names"
                f" {len(keys)} keys x {len(configs)} configs"
            )
        digest.update(f"\0{pool_id}\0{median.shape}\0".encode())
        digest.update(np.ascontiguousarray(median).tobytes())
        pools.append(
            Pool(
                pool_id,
                family,
                device,
                regime,
                raw.get("regime_words", ""),
                list(keys),
                list(configs),
                median,
                path,
            )
        )
    return Dataset(directory, manifest, pools, digest.hexdigest())


def build_spec(
    dataset: Dataset, family: str, pools: Sequence[Pool], fork_pairs: bool = False
) -> FeatureSpec:
    """The layout of a family from the manifest's kinds and the vocabularies of the data
    (symbolic forks also take every option the library declares)."""
    kinds = dataset.kinds(family)
    where = f"{dataset.path / 'manifest.json'}: features of {family}"
    for part in ("key", "config"):
        bad = {n: k for n, k in kinds[part].items() if k not in ("int", "symbol")}
        if bad:
            raise EmmyError(f"{where}: {part} kinds must be 'int' or 'symbol', not {bad}")
    key_values: dict[str, dict[str, int]] = {
        n: {} for n, k in kinds["key"].items() if k == "symbol"
    }
    fork_values: dict[str, set[str]] = {
        n: set() for n, k in kinds["config"].items() if k == "symbol"
    }
    declared, defaults = _declaration(family)
    for pool in pools:
        for key in pool.parsed_keys:
            key = {**defaults, **key}
            for name, counts in key_values.items():
                counts[str(key.get(name))] = counts.get(str(key.get(name)), 0) + 1
        for config in pool.parsed_configs:
            for name, values in fork_values.items():
                values.add(str(config.get(name)))
    key_symbols = {
        n: tuple(
            sorted(v for v, _ in sorted(c.items(), key=lambda i: (-i[1], i[0]))[:MAX_VOCABULARY])
        )
        for n, c in key_values.items()
    }
    fork_symbols = {
        n: tuple(sorted(values | {str(o) for o in declared.get(n, ())}))
        for n, values in fork_values.items()
    }
    return FeatureSpec(
        family=family,
        key_ints=tuple(n for n, k in kinds["key"].items() if k == "int"),
        key_symbols=key_symbols,
        fork_ints=tuple(n for n, k in kinds["config"].items() if k == "int"),
        fork_symbols=fork_symbols,
        devices=tuple(sorted({p.device for p in pools})),
        forks=tuple(kinds["config"]),
        fork_pairs=fork_pairs,
        key_defaults=defaults,
    )


def _declaration(family: str) -> tuple[dict[str, tuple], dict[str, Value]]:
    """What the library declares of a family: each fork's options, and the defaults of the
    key's optional names (nothing for a family the library does not know)."""
    # the library loads xDSL, which a program-cache hit (it reads prior_files()) does not
    from emmy.dsl.library import declarations
    from emmy.sites.fork_space import ForkSpace

    decl = declarations().get(family)
    if decl is None:
        return {}, {}
    space = ForkSpace.of(decl)
    return dict(space.options), dict(space.key_defaults)


def finite_log(values: np.ndarray) -> np.ndarray:
    """Natural log of times, NaN where a time is missing."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(values)
    out[~(np.isfinite(values) & (values > 0))] = np.nan
    return out


__all__ = [
    "FeatureSpec",
    "Pool",
    "Dataset",
    "load_dataset",
    "build_spec",
    "split_of",
    "finite_log",
]
