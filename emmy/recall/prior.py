"""The learned prior, the third oracle: predicts a config's time for a key on a device.

`emmy fit` (emmy/fitting/prior_fit.py, with JAX) writes `weights.npz` and `metadata.json`
beside this file, or where `-o` says; `$EMMY_PRIOR_DIR` points a compile at another folder.
A compile evaluates them here with numpy alone: nothing on this path imports JAX.

The model is, per family, an ensemble of small MLPs (each from its own seed) over the
features of emmy/recall/prior_features.py, predicting the natural log of the median time
in seconds as the mean of its members. For a site, the prior scores every
allowed config and picks the fastest predicted; ties go to the declared order. A device the
family was not fitted on, a family it does not know, or a library changed since the fit
(other key names or forks) get no decision: the prior never guesses.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from emmy.base.errors import EmmyError
from emmy.base.paths import METADATA, WEIGHTS, prior_dir, write_atomic
from emmy.dialects import evidence
from emmy.recall.prior_features import FeatureSpec
from emmy.recall.query import Decision, SiteQuery

PRIOR_SCHEMA = 2
ACTIVATIONS = ("relu",)


class Prior(Protocol):
    def decide(self, query: SiteQuery) -> Decision | None: ...


# --- the model, in numpy ----------------------------------------------------------------


Layers = tuple[tuple[np.ndarray, np.ndarray], ...]


@dataclass(frozen=True)
class FamilyModel:
    """One family's ensemble of MLPs, each fitted from its own seed: normalised features →
    hidden ReLU layers → log(seconds), averaged over the members (one member's ranking
    moves with its seed as with any setting; their mean does not)."""

    spec: FeatureSpec
    members: tuple[Layers, ...]
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float

    def predict_log(
        self,
        device: str,
        keys: Sequence[Mapping[str, int | str]],
        configs: Sequence[Mapping[str, int | str]],
    ) -> np.ndarray:
        """Predicted natural log of the time in seconds, [len(keys), len(configs)]."""
        x = self.spec.matrix(device, keys, configs)
        return self.forward(x)

    def forward(self, x: np.ndarray) -> np.ndarray:
        normalised = (x - self.x_mean) / self.x_std
        outputs = []
        for layers in self.members:
            h = normalised
            for i, (w, b) in enumerate(layers):
                h = h @ w + b
                if i < len(layers) - 1:
                    h = np.maximum(h, 0.0)
            outputs.append(h[..., 0])
        return np.mean(outputs, axis=0) * self.y_std + self.y_mean

    def arrays(self) -> dict[str, np.ndarray]:
        name = self.spec.family
        out = {f"{name}.x_mean": self.x_mean, f"{name}.x_std": self.x_std}
        out[f"{name}.y"] = np.array([self.y_mean, self.y_std])
        for m, layers in enumerate(self.members):
            for i, (w, b) in enumerate(layers):
                out[f"{name}.m{m}.W{i}"], out[f"{name}.m{m}.b{i}"] = w, b
        return out


class FittedPrior:
    """A fitted prior read for one device: decides the sites of families fitted on it."""

    def __init__(
        self, directory: Path, metadata: dict, models: dict[str, FamilyModel], device: str
    ):
        self.directory = directory
        self.metadata = metadata
        self.models = models
        self.device = device
        self.dataset = metadata.get("dataset", {}).get("sha256", "")

    def decide(self, query: SiteQuery) -> Decision | None:
        model = self.models.get(query.site.family)
        if model is None or self.device not in model.spec.devices:
            return None
        key = query.site.values
        candidates = query.allowed
        if not candidates or not model.spec.accepts(key, candidates[0]):
            return None
        predicted = np.exp(model.predict_log(self.device, [key], candidates)[0])
        order = np.argsort(predicted, kind="stable")  # ties: the declared order
        best = int(order[0])
        predicted_best = evidence.PriorEvidence(
            float(predicted[best]), self.dataset, len(candidates)
        )
        runner_up = None
        if len(order) > 1:
            second = int(order[1])
            runner_up = evidence.PredictedRunnerUp(candidates[second], float(predicted[second]))
        return Decision(dict(candidates[best]), "prior", predicted_best, runner_up)


# --- reading and writing ----------------------------------------------------------------

_CACHE: dict[tuple, tuple[dict, dict[str, FamilyModel]]] = {}


def load_prior(device: str) -> Prior | None:
    """The prior for `device`: None when none is fitted, or none of its families was fitted
    on `device`. A malformed prior is an EmmyError naming its file."""
    directory = prior_dir()
    weights, metadata = directory / WEIGHTS, directory / METADATA
    if not weights.exists() and not metadata.exists():
        return None
    doc, models = read_prior(directory)
    if not any(device in m.spec.devices for m in models.values()):
        return None
    return FittedPrior(directory, doc, models, device)


def read_prior(directory: str | Path) -> tuple[dict, dict[str, FamilyModel]]:
    """The metadata and the per-family models of a prior folder, validated whole."""
    directory = Path(directory)
    weights, metadata = directory / WEIGHTS, directory / METADATA
    if not weights.is_file() and not metadata.is_file():
        raise EmmyError(f"{directory}: no prior there ({WEIGHTS} and {METADATA})")
    for path in (weights, metadata):
        if not path.is_file():
            other = metadata if path == weights else weights
            raise EmmyError(
                f"{path}: missing (a prior is {WEIGHTS} and {METADATA}; {other.name} is there)"
            )
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in (weights, metadata))
    cache_key = (str(directory.resolve()), stamp)
    if cache_key not in _CACHE:
        _CACHE.clear()
        _CACHE[cache_key] = _read(weights, metadata)
    return _CACHE[cache_key]


def _read(weights: Path, metadata: Path) -> tuple[dict, dict[str, FamilyModel]]:
    try:
        doc = json.loads(metadata.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EmmyError(f"{metadata}: not a prior's metadata ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != PRIOR_SCHEMA:
        raise EmmyError(f"{metadata}: not a prior's metadata of schema {PRIOR_SCHEMA}")
    architecture, families = doc.get("architecture"), doc.get("families")
    if not isinstance(architecture, dict) or not isinstance(families, dict):
        raise EmmyError(f"{metadata}: 'architecture' and 'families' must be objects")
    if not isinstance(architecture.get("hidden"), list):
        raise EmmyError(f"{metadata}: architecture.hidden must be a list of layer widths")
    members = architecture.get("ensemble")
    if not isinstance(members, int) or isinstance(members, bool) or members < 1:
        raise EmmyError(f"{metadata}: architecture.ensemble must be a count of members (1 or more)")
    if architecture.get("activation") not in ACTIVATIONS:
        raise EmmyError(
            f"{metadata}: activation {architecture.get('activation')!r} is not one this emmy"
            f" evaluates ({', '.join(ACTIVATIONS)})"
        )
    data = weights.read_bytes()
    expected = doc.get("weights_sha256")
    if expected != hashlib.sha256(data).hexdigest():
        raise EmmyError(
            f"{weights}: its sha256 is not the one {metadata.name} records: the file is"
            " corrupt or from another fit"
        )
    try:
        with np.load(weights, allow_pickle=False) as npz:
            arrays = {name: np.asarray(npz[name], dtype=np.float64) for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise EmmyError(f"{weights}: not a readable weights file ({e})") from None
    models: dict[str, FamilyModel] = {}
    for family, entry in families.items():
        try:
            spec = FeatureSpec.from_json(entry["features"])
            models[family] = _model(spec, arrays, len(architecture["hidden"]) + 1, members)
        except (KeyError, TypeError, ValueError) as e:
            raise EmmyError(
                f"{weights}: family {family}: weights do not fit the metadata ({e})"
            ) from None
    return doc, models


def _model(spec: FeatureSpec, arrays: dict[str, np.ndarray], depth: int, count: int) -> FamilyModel:
    name = spec.family
    members = tuple(
        tuple((arrays[f"{name}.m{m}.W{i}"], arrays[f"{name}.m{m}.b{i}"]) for i in range(depth))
        for m in range(count)
    )
    for m, layers in enumerate(members):
        width = spec.size
        for i, (w, b) in enumerate(layers):
            if w.ndim != 2 or w.shape[0] != width or b.shape != (w.shape[1],):
                raise ValueError(
                    f"member {m} layer {i} is {w.shape}/{b.shape}, expected {width} inputs"
                )
            width = w.shape[1]
        if width != 1:
            raise ValueError(f"member {m}'s last layer has {width} outputs, not 1")
    layers = [p for member in members for p in member]
    x_mean, x_std, y = arrays[f"{name}.x_mean"], arrays[f"{name}.x_std"], arrays[f"{name}.y"]
    if x_mean.shape != (spec.size,) or x_std.shape != (spec.size,) or y.shape != (2,):
        raise ValueError("normalisation arrays have the wrong shapes")
    if not all(np.all(np.isfinite(a)) for a in (x_mean, x_std, y, *(p for l in layers for p in l))):
        raise ValueError("non-finite weights")
    return FamilyModel(spec, members, x_mean, x_std, float(y[0]), float(y[1]))


def write_prior(
    directory: str | Path, models: Mapping[str, FamilyModel], metadata: dict
) -> list[Path]:
    """Write `weights.npz` (the same bytes for the same weights) and `metadata.json` (with the
    weights' sha256 and every family's feature layout added), each atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = _npz_bytes({k: v for m in models.values() for k, v in m.arrays().items()})
    doc = dict(metadata)
    doc["schema"] = PRIOR_SCHEMA
    doc["weights_sha256"] = hashlib.sha256(weights).hexdigest()
    families = dict(doc.get("families", {}))
    for name, model in models.items():
        families[name] = {**families.get(name, {}), "features": model.spec.to_json()}
    doc["families"] = families
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    paths = [directory / WEIGHTS, directory / METADATA]
    write_atomic(paths[0], weights)
    write_atomic(paths[1], text.encode())
    return paths


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An .npz archive with fixed timestamps and order, so a refit of the same weights is the
    same file."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            member = io.BytesIO()
            np.lib.format.write_array(
                member, np.ascontiguousarray(arrays[name]), allow_pickle=False
            )
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()
