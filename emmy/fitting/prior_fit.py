"""`emmy fit`: fits the prior on a dataset with JAX and writes weights.npz + metadata.json.

The model (one per family; see below why) is an ensemble of ENSEMBLE MLPs over the
standardised features of emmy/recall/prior_features.py, each predicting log(median
seconds) of a config for a key on a device, their mean the prediction. The members differ
by their seed alone: with a few dozen keys per family, one network's ranking of the held-out
keys moves with its seed as with any setting (0.90 to 0.93 mean top-1 across seeds
on the committed dataset), and the mean of ten is steadier. Each member's loss, per key (a
row of a pool's matrix), is

    mean squared error of log time over the measured configs
    + LISTWISE × KL(softmax(-log t / τ) ‖ softmax(-predicted / τ)) over the same configs

The first term gives times worth printing as provenance; the second (ListNet with a
temperature of τ in log-time units) spends the model's capacity on ordering the fast
configs of each key, which is what the top-1 pick needs: an error on a config 3× slower
than the best costs nothing there.

One model per family, not one with a family one-hot: families share neither key names
nor forks (a `vec` of softmax and a `block_m` of matmul are different inputs), so a joint
model would see a union of mostly-zero features and learn little across them; per family,
fits are independent, small and can be redone one at a time. Devices share the model
(device one-hot), so what a family's cost looks like carries over between devices.

Layouts: each family is fitted twice, without and with the fork-pair features (see
features.py), and keeps the fit of lower validation loss: pairs help where a ceiling over a
product of forks decides the time (rms_norm, layer_norm), and only add inputs to fit where
it does not (softmax, elementwise on the committed dataset; metadata.json says which).

Split: fixed by a hash of (family, key) (features.split_of): 20 % of keys are held out of
the fit entirely (what the metadata and `emmy eval` score), 15 % validate (early stopping
keeps the parameters of the best validation loss), the rest train. Only pools under their
device's deployable regime are fitted: a compile reads nothing else.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# JAX: the optional fit extra, which the type checker's venv lacks
import jax  # pyright: ignore[reportMissingImports]
import jax.numpy as jnp  # pyright: ignore[reportMissingImports]
import numpy as np

from emmy.base.errors import EmmyError
from emmy.base.paths import PRIOR_DIR
from emmy.base.regime import regime_for
from emmy.families.registry import choice_forks
from emmy.fitting.prior_eval import evaluate_pool
from emmy.recall.prior import FamilyModel, Layers, write_prior
from emmy.recall.prior_features import (
    DATASET_HASH,
    HELD_OUT_FRACTION,
    VALIDATION_FRACTION,
    Dataset,
    FeatureSpec,
    Pool,
    build_spec,
    finite_log,
    load_dataset,
    split_of,
)

HIDDEN = (64, 64)
LISTWISE = 1.0
TEMPERATURE = 0.1
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-4
BATCH_KEYS = 16
PATIENCE = 40
#: members of each family's ensemble, each from its own seed
ENSEMBLE = 10
#: configs of a key that one step looks at (a random sample of the measured ones)
SAMPLE_CONFIGS = 128


@dataclass
class FamilyData:
    spec: FeatureSpec
    x: np.ndarray  # [rows, configs, features] float32
    y: np.ndarray  # [rows, configs] log seconds, NaN where not measured
    splits: list[str]
    pools: list[Pool]


def deployable_pools(dataset: Dataset) -> tuple[list[Pool], dict[str, str]]:
    """The pools a compile could use (its device's deployable regime), and why others not."""
    kept, skipped = [], {}
    for pool in dataset.pools:
        if pool.family in choice_forks():
            skipped[pool.id] = "a host-level choice: its options' times are sums of kernel rows"
            continue
        try:
            regime = regime_for(pool.device).id
        except EmmyError as e:
            skipped[pool.id] = f"device {pool.device!r}: {e}"
            continue
        if pool.regime != regime:
            skipped[pool.id] = f"regime {pool.regime} is not {pool.device}'s deployable {regime}"
            continue
        if not pool.measured.any():
            skipped[pool.id] = "no measured cell"
            continue
        kept.append(pool)
    return kept, skipped


def family_data(
    dataset: Dataset, family: str, pools: list[Pool], fork_pairs: bool = False
) -> FamilyData:
    """Every (device, key) of the family as a row over the union of the pools' configs."""
    spec = build_spec(dataset, family, pools, fork_pairs)
    columns = sorted({c for p in pools for c in p.configs})
    configs = [json.loads(c) for c in columns]
    xs, ys, splits = [], [], []
    for pool in pools:
        index = np.array([columns.index(c) for c in pool.configs])
        y = np.full((len(pool.keys), len(columns)), np.nan)
        y[:, index] = finite_log(pool.median_s)
        xs.append(spec.matrix(pool.device, pool.parsed_keys, configs).astype(np.float32))
        ys.append(y)
        splits += [split_of(family, k) for k in pool.keys]
    return FamilyData(spec, np.concatenate(xs), np.concatenate(ys), splits, pools)


# --- the model, in JAX ------------------------------------------------------------------


def init_params(seed: int, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
    """He-normal hidden layers, a small output layer; drawn with numpy (each jax.random
    call would be one more XLA compile)."""
    rng = np.random.default_rng(seed)
    params = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        scale = np.sqrt(2.0 / n_in) if i < len(sizes) - 2 else 0.1 / np.sqrt(n_in)
        w = (rng.standard_normal((n_in, n_out)) * scale).astype(np.float32)
        params.append((jnp.asarray(w), jnp.asarray(np.zeros(n_out, np.float32))))
    return params


def forward(params, x: jax.Array) -> jax.Array:
    """The same network as FamilyModel.forward (numpy), on standardised inputs."""
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = jax.nn.relu(h)
    return h[..., 0]


def loss_terms(params, x, y, mask, tau):
    """(mse, listwise KL) of a batch of rows; y standardised, tau in standardised units."""
    pred = forward(params, x)
    count = jnp.maximum(mask.sum(), 1.0)
    mse = jnp.sum(mask * (pred - y) ** 2) / count
    has = mask.sum(axis=1) > 0
    target = jax.nn.softmax(jnp.where(mask > 0, -y / tau, -1e9), axis=1)
    log_q = jax.nn.log_softmax(jnp.where(mask > 0, -pred / tau, -1e9), axis=1)
    log_p = jnp.log(jnp.where(target > 0, target, 1.0))
    kl = jnp.sum(jnp.where(mask > 0, target * (log_p - log_q), 0.0), axis=1)
    kl = jnp.sum(jnp.where(has, kl, 0.0)) / jnp.maximum(has.sum(), 1)
    return mse, kl


def predict_log_jax(model: FamilyModel, device: str, keys, configs) -> np.ndarray:
    """The JAX networks' log-time predictions for a fitted FamilyModel, averaged over its
    members (for checks)."""
    x = model.spec.matrix(device, keys, configs)
    xn = jnp.asarray(((x - model.x_mean) / model.x_std).astype(np.float32))
    outputs = [
        np.asarray(forward([(jnp.asarray(w), jnp.asarray(b)) for w, b in layers], xn))
        for layers in model.members
    ]
    return np.mean(outputs, axis=0).astype(np.float64) * model.y_std + model.y_mean


# --- training ---------------------------------------------------------------------------


@dataclass
class FitResult:
    model: FamilyModel
    best_epoch: int
    validation_loss: float | None
    rows: dict[str, int]
    seconds: float


def fit_family(
    data: FamilyData,
    epochs: int,
    seed: int,
    log: Callable[[str], None] = print,
    hidden: tuple[int, ...] = HIDDEN,
) -> FitResult:
    start = time.perf_counter()
    measured = np.isfinite(data.y)
    rows = _measured_rows_by_split(data, measured)
    train = np.array(rows["train"], dtype=np.int32)
    validation = np.array(rows["validation"], dtype=np.int32)
    if not len(train):
        raise EmmyError(f"family {data.spec.family}: no measured training key to fit on")
    scale = _Scale.of_training(data, measured, train)
    watch = validation if len(validation) else train
    trainer = _Trainer(data, measured, scale, train, watch, epochs, hidden)
    fitted = [trainer.member(seed * ENSEMBLE + m) for m in range(ENSEMBLE)]
    members = tuple(layers for layers, _, _ in fitted)
    best_loss = float(np.mean([loss for _, loss, _ in fitted]))
    best_epoch = int(np.median([epoch for _, _, epoch in fitted]))
    model = FamilyModel(data.spec, members, scale.x_mean, scale.x_std, scale.y_mean, scale.y_std)
    seconds = time.perf_counter() - start
    log(
        f"  {data.spec.family}: {len(train)} training keys, {len(validation)} validating, "
        f"{len(rows['held_out'])} held out; {data.spec.size} features; {ENSEMBLE} members, median "
        f"best epoch {best_epoch} (mean validation loss {best_loss:.4f}) in {seconds:.1f} s"
    )
    return FitResult(
        model,
        best_epoch,
        best_loss if len(validation) else None,
        {k: len(v) for k, v in rows.items()},
        seconds,
    )


def _measured_rows_by_split(data: FamilyData, measured: np.ndarray) -> dict[str, list[int]]:
    """The rows of each split (train, validation, held_out) with a measured config."""
    # an array (numpy types `any` by an axis as a bool or an array: it cannot count the dims)
    has = np.asarray(measured.any(axis=1))
    return {
        s: [i for i, (r, h) in enumerate(zip(data.splits, has, strict=True)) if r == s and h]
        for s in ("train", "validation", "held_out")
    }


@dataclass(frozen=True)
class _Scale:
    """The standardisation of a family's features and log times, from its training cells."""

    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float

    @classmethod
    def of_training(cls, data: FamilyData, measured: np.ndarray, train: np.ndarray) -> _Scale:
        cells = data.x[train][measured[train]]
        x_mean = cells.mean(axis=0).astype(np.float64)
        x_std = cells.std(axis=0).astype(np.float64)
        x_std[x_std < 1e-6] = 1.0
        y_cells = data.y[train][measured[train]]
        return cls(x_mean, x_std, float(y_cells.mean()), float(max(y_cells.std(), 1e-3)))


def _objective(params, arrays, index, columns, weight, tau):
    """The loss of a batch: rows `index`, each over its sampled `columns`, weighted (the
    padding of the last batch weighs 0)."""
    xn, yn, mask = arrays
    m = mask[index[:, None], columns] * weight[:, None]
    x, y = xn[index[:, None], columns], yn[index[:, None], columns]
    mse, kl = loss_terms(params, x, y, m, tau)
    return mse + LISTWISE * kl


def _adam(params, moments, grads, t):
    """One Adam step with decoupled weight decay: the new parameters and moments."""
    first, second = moments
    first = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, first, grads)
    second = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, second, grads)
    correction = jnp.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    params = jax.tree.map(
        lambda p, m, v: (
            p - LEARNING_RATE * (correction * m / (jnp.sqrt(v) + 1e-8) + WEIGHT_DECAY * p)
        ),
        params,
        first,
        second,
    )
    return params, (first, second)


def _training_step(tau: float) -> Callable:
    """The jitted training step at temperature `tau` (a constant of the trace)."""

    @jax.jit
    def step(params, moments, t, arrays, index, columns, weight):
        loss, grads = jax.value_and_grad(_objective)(params, arrays, index, columns, weight, tau)
        params, moments = _adam(params, moments, grads, t)
        return params, moments, loss

    return step


def _watched_loss(tau: float) -> Callable:
    """The jitted loss of whole rows (every config) at temperature `tau`."""

    @jax.jit
    def evaluate(params, arrays, index):
        xn, yn, mask = arrays
        m = mask[index]
        mse, kl = loss_terms(params, xn[index], yn[index], m, tau)
        return mse + LISTWISE * kl

    return evaluate


def _epoch_sample(
    rng: np.random.Generator,
    train: np.ndarray,
    batch: int,
    measured: np.ndarray,
    n_columns: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An epoch's training rows (shuffled, padded to whole batches), the configs each
    looks at and each row's weight (0 for the padding)."""
    order = rng.permutation(train)
    padded = -len(order) % batch
    weight = np.ones(len(order) + padded, dtype=np.float32)
    weight[len(order) :] = 0.0
    order = np.concatenate([order, order[:padded]]) if padded else order
    # each key's configs in a random order, measured ones first: a step sees a
    # sample of n_columns of them (all when fewer are measured; the rest masked out)
    noise = rng.random((len(order), measured.shape[1])) + ~measured[order]
    columns = np.argsort(noise, axis=1)[:, :n_columns].astype(np.int32)
    return order, columns, weight


class _Trainer:
    """Trains the members of one family's ensemble, each from its seed, keeping the
    parameters of the best loss on the watched rows (early stopping)."""

    def __init__(
        self,
        data: FamilyData,
        measured: np.ndarray,
        scale: _Scale,
        train: np.ndarray,
        watch: np.ndarray,
        epochs: int,
        hidden: tuple[int, ...],
    ) -> None:
        xn = jnp.asarray(((data.x - scale.x_mean) / scale.x_std).astype(np.float32))
        yn = jnp.asarray(
            np.where(measured, (data.y - scale.y_mean) / scale.y_std, 0.0).astype(np.float32)
        )
        mask = jnp.asarray(measured.astype(np.float32))
        self.arrays = (xn, yn, mask)  # arguments, not constants: XLA would fold them at every jit
        tau = TEMPERATURE / scale.y_std
        self.step, self.evaluate = _training_step(tau), _watched_loss(tau)
        self.sizes = [data.spec.size, *hidden, 1]
        self.measured, self.train, self.watch, self.epochs = measured, train, watch, epochs
        self.batch = min(BATCH_KEYS, len(train))
        self.n_columns = min(SAMPLE_CONFIGS, data.y.shape[1])

    def member(self, member_seed: int) -> tuple[Layers, float, int]:
        """The best layers of one member, their loss on the watched rows and their epoch."""
        params = init_params(member_seed, self.sizes)
        zeros = [
            (jnp.asarray(np.zeros(w.shape, np.float32)), jnp.asarray(np.zeros(b.shape, np.float32)))
            for w, b in params
        ]
        moments = (zeros, zeros)
        rng = np.random.default_rng(member_seed + 1)
        best, best_loss, best_epoch, t = params, float("inf"), 0, 0
        for epoch in range(1, self.epochs + 1):
            params, moments, t = self._epoch(rng, params, moments, t)
            loss = float(self.evaluate(params, self.arrays, jnp.asarray(self.watch)))
            if loss < best_loss - 1e-6:
                best, best_loss, best_epoch = params, loss, epoch
            elif epoch - best_epoch >= PATIENCE:
                break
        layers = tuple(
            (np.asarray(w, dtype=np.float32), np.asarray(b, dtype=np.float32)) for w, b in best
        )
        return layers, best_loss, best_epoch

    def _epoch(self, rng: np.random.Generator, params, moments, t: int):
        """One pass over the training rows in batches: the parameters, moments and step
        count after it."""
        batch = self.batch
        order, columns, weight = _epoch_sample(
            rng, self.train, batch, self.measured, self.n_columns
        )
        for lo in range(0, len(order), batch):
            t += 1
            params, moments, _ = self.step(
                params,
                moments,
                t,
                self.arrays,
                jnp.asarray(order[lo : lo + batch]),
                jnp.asarray(columns[lo : lo + batch]),
                jnp.asarray(weight[lo : lo + batch]),
            )
        return params, moments, t


#: the two feature layouts a family is fitted with (FeatureSpec.fork_pairs off and on)
LAYOUTS = {False: "plain", True: "fork pairs"}


def _better_layout(fits: dict[bool, FitResult]) -> FitResult:
    """The fit of lower validation loss (the held-out keys play no part); the plain layout
    where there is no validation key or the losses tie."""
    plain, pairs = fits[False], fits[True]
    if plain.validation_loss is None or pairs.validation_loss is None:
        return plain
    return pairs if pairs.validation_loss < plain.validation_loss else plain


def family_seed(seed: int, family: str) -> int:
    """A family's seed, from the fit's and the family's name alone: adding a family to the
    dataset leaves the others' fits as they were."""
    digest = hashlib.sha256(f"{seed}\n{family}".encode()).digest()
    return int.from_bytes(digest[:3], "big")


def fit(
    dataset_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    epochs: int = 400,
    seed: int = 0,
    hidden: tuple[int, ...] = HIDDEN,
    log: Callable[[str], None] = print,
) -> dict:
    """Fit every family of the dataset; write the prior to `out_dir` (default: the package's
    prior folder). Returns the metadata written."""
    dataset = load_dataset(dataset_dir)
    pools, skipped = deployable_pools(dataset)
    for pool_id, reason in skipped.items():
        log(f"  skipping pool {pool_id}: {reason}")
    if not pools:
        raise EmmyError(f"{dataset.path / 'manifest.json'}: no pool to fit on")
    log(f"fitting {len(pools)} pools of dataset {dataset.sha256[:16]} ({dataset.path})")
    results, layouts = _fit_families(dataset, pools, epochs, seed, hidden, log)
    models = {f: r.model for f, r in results.items()}
    metrics = {
        pool.id: evaluate_pool(dataset, pool, models, models[pool.family].spec).metrics()
        for pool in pools
    }
    metadata = {
        "dataset": {
            "sha256": dataset.sha256,
            "hash": DATASET_HASH,
            "sources": dataset.manifest.get("sources", []),
            "pools": [p.id for p in pools],
            "skipped_pools": skipped,
        },
        **_method_metadata(epochs, seed, hidden),
        "families": _families_metadata(results, layouts),
        "metrics": metrics,
    }
    directory = Path(out_dir) if out_dir else PRIOR_DIR
    paths = write_prior(directory, models, metadata)
    _log_metrics(metrics, log)
    log(f"wrote {paths[0]} and {paths[1]}")
    return json.loads(paths[1].read_text())


def _fit_families(
    dataset: Dataset,
    pools: list[Pool],
    epochs: int,
    seed: int,
    hidden: tuple[int, ...],
    log: Callable[[str], None],
) -> tuple[dict[str, FitResult], dict[str, dict[str, float | None]]]:
    """Per family of `pools`, the fit of the better layout, and each layout's validation
    loss."""
    results: dict[str, FitResult] = {}
    layouts: dict[str, dict[str, float | None]] = {}
    for family in sorted({p.family for p in pools}):
        same = [p for p in pools if p.family == family]
        fits = {
            pairs: fit_family(
                family_data(dataset, family, same, pairs),
                epochs,
                family_seed(seed, family),
                log,
                hidden,
            )
            for pairs in (False, True)
        }
        results[family] = _better_layout(fits)
        layouts[family] = {LAYOUTS[p]: r.validation_loss for p, r in fits.items()}
        log(f"  {family}: keeping the {LAYOUTS[results[family].model.spec.fork_pairs]} layout")
    return results, layouts


def _method_metadata(epochs: int, seed: int, hidden: tuple[int, ...]) -> dict:
    """How the prior was fitted: the split, the architecture, the loss and the training."""
    return {
        "split": {
            "rule": "u = first 8 bytes of sha256(family + '\\n' + key) / 2**64: held out if "
            f"u < {HELD_OUT_FRACTION}, validation if u < {HELD_OUT_FRACTION + VALIDATION_FRACTION}"
            ", else train",
            "held_out": HELD_OUT_FRACTION,
            "validation": VALIDATION_FRACTION,
        },
        "architecture": {
            "model": "an ensemble of MLPs per family, their log-time predictions averaged",
            "ensemble": ENSEMBLE,
            "input": "standardised features (emmy/recall/prior_features.py), per family the "
            "layout (plain or with fork pairs) of lower validation loss",
            "hidden": list(hidden),
            "activation": "relu",
            "output": "natural log of the median time in seconds",
        },
        "loss": {
            "per_key": "MSE(log t) + listwise KL(softmax(-log t/tau) || softmax(-pred/tau))",
            "listwise_weight": LISTWISE,
            "temperature": TEMPERATURE,
        },
        "training": {
            "optimizer": "adam with decoupled weight decay",
            "learning_rate": LEARNING_RATE,
            "weight_decay": WEIGHT_DECAY,
            "batch_keys": BATCH_KEYS,
            "max_epochs": epochs,
            "patience": PATIENCE,
            "early_stopping": "best validation loss",
            "seed": seed,
            "jax": jax.__version__,
        },
    }


def _families_metadata(
    results: dict[str, FitResult], layouts: dict[str, dict[str, float | None]]
) -> dict:
    """Per family: its devices, rows per split, best epoch, validation loss and layout."""
    return {
        f: {
            "devices": list(r.model.spec.devices),
            "rows": r.rows,
            "best_epoch": r.best_epoch,
            "validation_loss": None if r.validation_loss is None else round(r.validation_loss, 6),
            "layout": LAYOUTS[r.model.spec.fork_pairs],
            "validation_loss_per_layout": {
                name: None if loss is None else round(loss, 6) for name, loss in layouts[f].items()
            },
        }
        for f, r in results.items()
    }


def _log_metrics(metrics: dict[str, dict], log: Callable[[str], None]) -> None:
    for pool_id, m in metrics.items():
        prior, default, near = m["prior"], m["default"], m["nearest key"]
        log(
            f"  {pool_id}: held-out top-1 prior {_fmt(prior['top1'])}, default "
            f"{_fmt(default['top1'])}, nearest key {_fmt(near['top1'])} "
            f"({m['held_out_keys']} keys)"
        )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
