"""`emmy eval`: how well each way to pick a config does on a dataset's held-out keys.

Per pool (family, device, regime) of a dataset written by `emmy db export`: its coverage
(keys, configs, the fraction of cells measured cleanly, the golden files' entries), and on
the keys held out of every fit (features.split_of) the score of each way to pick:

- **prior**: the config the fitted prior predicts fastest among those measured for the key
  (a dataset measures a sample of each key's configs: a pick outside it has no time), and
  its ranking of the key's measured configs;
- **default**: the declared default, or the config the constraints move it to (as the
  default oracle does);
- **nearest key**: among the configs measured for the key, the fastest on the training key
  nearest in key-feature space that shares one with it, and that key's ranking;
- **golden**: the golden files' entry for the key, where one applies (its device and regime).

Scores, per held-out key with at least two measured configs (a key measured in one config
leaves nothing to choose; best = its fastest time):

- **top-1** = best / time of the pick, 1.0 when the pick is the fastest measured. A pick that
  was not measured for that key has no time: it counts as *missing* (reported, not scored).
- **top-5** = best / the fastest time among the 5 configs the picker ranks first among those
  measured for the key (only for pickers that rank: the prior, nearest key).
- **regret** = time of the pick / best - 1 (0 % perfect); mean and worst over scored keys.

Nothing here imports JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from emmy.base.errors import EmmyError
from emmy.base.paths import METADATA, RECIPES_DIR, WEIGHTS, prior_dir
from emmy.base.problem_key import SiteRef
from emmy.families.registry import choice_forks
from emmy.recall import golden
from emmy.recall.oracles import default_pick, site_query
from emmy.recall.prior import FamilyModel, read_prior
from emmy.recall.prior_features import (
    Dataset,
    FeatureSpec,
    Pool,
    build_spec,
    load_dataset,
    split_of,
)
from emmy.recall.tuning_db import canonical_config

PICKERS = ("prior", "default", "nearest key", "golden")
#: the note of a host-level choice's pool (attention's path, a matmul's)
NOT_FITTED_CHOICE = "not scored: a host-level choice, timed as the sum of its options' kernels"
TOP_K = 5


@dataclass
class KeyScore:
    key: str
    decided: bool
    measured: bool = False
    top1: float | None = None
    top5: float | None = None
    regret: float | None = None


@dataclass
class Summary:
    """One picker's scores over a pool's held-out keys."""

    keys: int = 0
    decided: int = 0
    scored: int = 0
    missing: int = 0
    top1: float | None = None
    top5: float | None = None
    mean_regret: float | None = None
    worst_regret: float | None = None
    scores: list[KeyScore] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, scores: list[KeyScore]) -> Summary:
        scored = [s for s in scores if s.measured]
        top5 = [s.top5 for s in scores if s.top5 is not None]
        regrets = [s.regret for s in scored if s.regret is not None]
        return cls(
            keys=len(scores),
            decided=sum(s.decided for s in scores),
            scored=len(scored),
            missing=sum(s.decided and not s.measured for s in scores),
            top1=_mean([s.top1 for s in scored]),
            top5=_mean(top5),
            mean_regret=_mean(regrets),
            worst_regret=max(regrets) if regrets else None,
            scores=scores,
        )

    def to_json(self) -> dict:
        return {
            "keys": self.keys,
            "decided": self.decided,
            "scored": self.scored,
            "missing": self.missing,
            "top1": _round(self.top1),
            "top5": _round(self.top5),
            "mean_regret": _round(self.mean_regret),
            "worst_regret": _round(self.worst_regret),
        }


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass
class PoolReport:
    pool: Pool
    held_out: list[int]
    cells_measured: float
    golden_keys: int
    pickers: dict[str, Summary]
    #: (measured, predicted) seconds of the prior on held-out measured cells
    predicted: tuple[np.ndarray, np.ndarray] | None = None
    note: str = ""

    def metrics(self) -> dict:
        return {
            "keys": len(self.pool.keys),
            "configs": len(self.pool.configs),
            "held_out_keys": len(self.held_out),
            "cells_measured": round(self.cells_measured, 6),
            **{name: s.to_json() for name, s in self.pickers.items()},
        }


# --- scoring ----------------------------------------------------------------------------


def score_key(
    key: str,
    times: np.ndarray,
    pick: int | None,
    ranking: np.ndarray | None = None,
) -> KeyScore:
    """Scores one pick (a column of `times`, or None when the picker decided nothing) and
    optionally a ranking (lower ranks first; NaN or inf: not ranked) of the same columns."""
    measured = np.isfinite(times) & (times > 0)
    best = float(np.min(times[measured]))
    score = KeyScore(key, decided=pick is not None)
    if pick is not None and pick >= 0 and measured[pick]:
        score.measured = True
        score.top1 = best / float(times[pick])
        score.regret = float(times[pick]) / best - 1.0
    if ranking is not None:
        columns = np.flatnonzero(measured & np.isfinite(ranking))
        if len(columns):
            first = columns[np.argsort(ranking[columns], kind="stable")[:TOP_K]]
            score.top5 = best / float(np.min(times[first]))
    return score


# --- the pickers ------------------------------------------------------------------------


def first_measured(ranking: np.ndarray, measured: np.ndarray) -> int | None:
    """The column a ranking (lower first; inf: not ranked) puts first among the configs
    measured for the key, or None when it ranks none of them."""
    candidates = np.flatnonzero(measured & np.isfinite(ranking))
    if not len(candidates):
        return None
    return int(candidates[np.argmin(ranking[candidates])])


def golden_files(device: str, regime: str) -> list:
    """The golden files of `device` under `regime` that a compile could read: every recipe's,
    then the model-agnostic one."""
    paths = sorted(RECIPES_DIR.glob(f"*/golden/{device}.json")) if RECIPES_DIR.is_dir() else []
    # read here, not at import, so that a test can point it elsewhere
    paths.append(golden.MODEL_AGNOSTIC_DIR / f"{device}.json")
    files = [golden.load_golden(p) for p in paths if p.is_file()]
    return [g for g in files if g.regime == regime]


def evaluate_pool(
    dataset: Dataset,
    pool: Pool,
    models: dict | None,
    spec: FeatureSpec | None = None,
) -> PoolReport:
    """Coverage and the held-out scores of every picker on one pool."""
    family = pool.family
    measured = pool.measured
    fraction = float(measured.mean()) if measured.size else 0.0
    if family in choice_forks():
        # a choice's option is timed as the sum of its kernels' rows: nothing to predict
        empty = {name: Summary.of([]) for name in PICKERS}
        return PoolReport(pool, [], fraction, 0, empty, None, NOT_FITTED_CHOICE)
    splits = [split_of(family, k) for k in pool.keys]
    held_out = [i for i, s in enumerate(splits) if s == "held_out" and measured[i].sum() >= 2]
    training = [i for i, s in enumerate(splits) if s != "held_out" and measured[i].any()]
    spec = spec or build_spec(dataset, family, [p for p in dataset.pools if p.family == family])
    goldens = golden_files(pool.device, pool.regime)
    golden_keys = sum(any(g.entry(family, k) for g in goldens) for k in pool.keys)
    model, note = _prior_model(models, pool)
    scores = _HeldOutScores(pool, spec, model, training, goldens)
    for i in held_out:
        scores.add(i)
    summaries = {name: Summary.of(s) for name, s in scores.scores.items()}
    return PoolReport(pool, held_out, fraction, golden_keys, summaries, scores.predicted(), note)


def _prior_model(models: dict | None, pool: Pool) -> tuple[FamilyModel | None, str]:
    """The prior's model to score on `pool`, or None and the note that says why not."""
    if models is None:
        return None, "not scored: no prior"
    model = models.get(pool.family)
    if model is None:
        return None, f"not scored: the prior has no model of {pool.family}"
    if pool.device not in model.spec.devices:
        return None, f"not scored: the prior was not fitted on {pool.device}"
    return model, ""


class _HeldOutScores:
    """The scores of every picker on the held-out keys of one pool, added key by key."""

    def __init__(
        self,
        pool: Pool,
        spec: FeatureSpec,
        model: FamilyModel | None,
        training: list[int],
        goldens: list,
    ) -> None:
        self.pool, self.spec, self.model = pool, spec, model
        self.training, self.goldens = training, goldens
        self.keys = pool.parsed_keys
        self.configs = pool.parsed_configs
        self.measured = pool.measured
        self.column = {c: j for j, c in enumerate(pool.configs)}
        self.train_vectors = np.array([spec.key_vector(self.keys[i]) for i in training])
        self.scores: dict[str, list[KeyScore]] = {name: [] for name in PICKERS}
        #: (measured, predicted) seconds of the prior's scored cells
        self.cells: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, i: int) -> None:
        """Scores every picker on the pool's key `i`."""
        key, times = self.pool.keys[i], self.pool.median_s[i]
        query = site_query(SiteRef.parse(self.pool.family, key), self.configs)
        self._add_prior(i, key, times)
        # the declared default, moved by the constraints
        self.scores["default"].append(score_key(key, times, self._col(default_pick(query))))
        if len(self.training):
            self.scores["nearest key"].append(self._nearest_key(i, key, times))
        # golden, where an entry applies
        entry = next((e for g in self.goldens if (e := g.entry(self.pool.family, key))), None)
        if entry is not None:
            self.scores["golden"].append(score_key(key, times, self._col(entry.config)))

    def _col(self, config: dict | None) -> int | None:
        if config is None:
            return None
        return self.column.get(canonical_config(config), -1)

    def _add_prior(self, i: int, key: str, times: np.ndarray) -> None:
        model, measured = self.model, self.measured[i]
        if model is None or not model.spec.accepts(self.keys[i], self.configs[0]):
            return
        ranking = np.exp(model.predict_log(self.pool.device, [self.keys[i]], self.configs)[0])
        pick = first_measured(ranking, measured)
        self.scores["prior"].append(score_key(key, times, pick, ranking))
        self.cells.append((times[measured], ranking[measured]))

    def _nearest_key(self, i: int, key: str, times: np.ndarray) -> KeyScore:
        """The score of the nearest training key that shares a measured config with key `i`
        (of the farthest, where none does)."""
        distances = np.linalg.norm(self.train_vectors - self.spec.key_vector(self.keys[i]), axis=1)
        for near in (self.training[j] for j in np.argsort(distances, kind="stable")):
            near_times = np.where(self.measured[near], self.pool.median_s[near], np.inf)
            pick = first_measured(near_times, self.measured[i])
            if pick is not None:
                break
        return score_key(key, times, pick, near_times)

    def predicted(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(measured, predicted) seconds of the prior on the cells it scored; None if none."""
        if not self.cells:
            return None
        return (
            np.concatenate([c[0] for c in self.cells]),
            np.concatenate([c[1] for c in self.cells]),
        )


# --- the command ------------------------------------------------------------------------


def select_pools(dataset: Dataset, view: str | None) -> list[Pool]:
    if not view:
        return list(dataset.pools)
    pools = [p for p in dataset.pools if view in (p.id, p.family, p.device)]
    if not pools:
        known = ", ".join(p.id for p in dataset.pools) or "none"
        raise EmmyError(
            f"{dataset.path / 'manifest.json'}: no pool, family or device {view!r} (pools: {known})"
        )
    return pools


def evaluate(dataset: Dataset, models: dict | None, view: str | None = None) -> list[PoolReport]:
    pools = select_pools(dataset, view)
    specs: dict[str, FeatureSpec] = {}
    reports = []
    for pool in pools:
        if pool.family not in specs and pool.family not in choice_forks():
            same = [p for p in dataset.pools if p.family == pool.family]
            specs[pool.family] = build_spec(dataset, pool.family, same)
        reports.append(evaluate_pool(dataset, pool, models, specs.get(pool.family)))
    return reports


def _fmt(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.1f}%" if percent else f"{value:.3f}"


def table_lines(reports: Sequence[PoolReport]) -> Iterator[str]:
    header = ("picker", "keys", "scored", "missing", "top-1", "top-5", "mean regret", "worst")
    for report in reports:
        pool = report.pool
        yield f"{pool.id}: {pool.family} on {pool.device}, regime {pool.regime} ({pool.regime_words})"
        yield (
            f"  coverage: {len(pool.keys)} keys ({len(report.held_out)} held out), "
            f"{len(pool.configs)} configs, {report.cells_measured * 100:.1f}% of cells measured; "
            f"golden entries for {report.golden_keys} of {len(pool.keys)} keys"
        )
        rows: list[tuple[str, ...]] = [header]
        for name, s in report.pickers.items():
            if name == "golden" and not s.keys:
                continue
            if name == "prior" and report.note:
                rows.append((name, report.note, "", "", "", "", "", ""))
                continue
            rows.append(_summary_row(name, s))
        yield from _aligned(rows)
    if len(reports) > 1:
        yield "all pools (held-out keys together):"
        rows = [header]
        for name in PICKERS:
            merged = Summary.of([k for r in reports for k in r.pickers[name].scores])
            if not merged.keys:
                continue
            rows.append(_summary_row(name, merged))
        yield from _aligned(rows)
        yield "mean per pool (each scored pool counts once):"
        means = mean_top1_per_pool(reports)
        wins, contested = prior_wins(reports)
        for name, (mean, pools) in means.items():
            beaten = ""
            if name == "prior":
                beaten = f"; better than default and nearest key in {wins} of {contested} pools"
            yield f"  {name:<12} top-1 {mean:.3f} over {pools} pools{beaten}"


def mean_top1_per_pool(reports: Sequence[PoolReport]) -> dict[str, tuple[float, int]]:
    """Per picker, its top-1 averaged over the pools that scored it, and how many did: a
    pool of few keys weighs as a pool of many."""
    means = {}
    for name in PICKERS:
        top1 = [t for r in reports if (t := r.pickers[name].top1) is not None]
        if top1:
            means[name] = (sum(top1) / len(top1), len(top1))
    return means


def prior_wins(reports: Sequence[PoolReport]) -> tuple[int, int]:
    """In how many of the pools that scored the prior its top-1 is strictly above both the
    declared default's and the nearest key's; and how many pools scored it."""
    scored = [r.pickers for r in reports if r.pickers["prior"].top1 is not None]
    return sum(_prior_wins(p) for p in scored), len(scored)


def _prior_wins(pickers: dict[str, Summary]) -> bool:
    prior = pickers["prior"].top1
    rivals = [pickers[rival].top1 for rival in ("default", "nearest key")]
    return prior is not None and all(prior > top1 for top1 in rivals if top1 is not None)


def _summary_row(name: str, summary: Summary) -> tuple[str, ...]:
    return (
        name,
        str(summary.keys),
        str(summary.scored),
        str(summary.missing),
        _fmt(summary.top1),
        _fmt(summary.top5),
        _fmt(summary.mean_regret, True),
        _fmt(summary.worst_regret, True),
    )


def _aligned(rows: list[tuple[str, ...]]) -> Iterator[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        if len(row) > 1 and row[2:] == ("",) * (len(row) - 2):
            cells = [row[0].ljust(widths[0]), row[1]]
        yield "  " + "  ".join(cells).rstrip()


def write_plots(reports: Sequence[PoolReport], directory: Path) -> list[Path] | None:
    """Per pool: the prior's predicted vs measured times, and each picker's regret
    distribution. None when matplotlib is not installed."""
    try:
        # matplotlib is optional, for the plots alone
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # after use("Agg"): plots to files, no display
    except ImportError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for report in reports:
        for plot in (_plot_predicted, _plot_regret):
            path = plot(plt, report, directory)
            if path is not None:
                written.append(path)
    return written


def _plot_predicted(plt, report: PoolReport, directory: Path) -> Path | None:
    """The prior's predicted vs measured times on a pool (None where it predicted none);
    `plt` is matplotlib.pyplot, imported by write_plots alone."""
    if report.predicted is None:
        return None
    measured, predicted = report.predicted
    figure, axes = plt.subplots(figsize=(5, 5))
    axes.loglog(measured, predicted, ".", alpha=0.4, markersize=3)
    low = float(min(measured.min(), predicted.min()))
    high = float(max(measured.max(), predicted.max()))
    axes.plot([low, high], [low, high], "k--", linewidth=0.8)
    axes.set_xlabel("measured median (s)")
    axes.set_ylabel("predicted (s)")
    axes.set_title(f"{report.pool.id}: held-out keys", fontsize=8)
    figure.tight_layout()
    path = directory / f"{report.pool.id}.predicted.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _plot_regret(plt, report: PoolReport, directory: Path) -> Path | None:
    """Each picker's distribution of regret on a pool (None where none scored a key);
    `plt` as for _plot_predicted."""
    ratios = {
        name: [1.0 + k.regret for k in s.scores if k.regret is not None]
        for name, s in report.pickers.items()
    }
    ratios = {name: r for name, r in ratios.items() if r}
    if not ratios:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    top = max(max(r) for r in ratios.values())
    bins = np.geomspace(1.0, max(top, 1.1) * 1.01, 30)
    for name, values in ratios.items():
        axes.hist(values, bins=bins, histtype="step", linewidth=1.5, label=name)
    axes.set_xscale("log")
    axes.set_xlabel("time of the pick / fastest measured (1 + regret)")
    axes.set_ylabel("held-out keys")
    axes.set_title(f"{report.pool.id}", fontsize=8)
    axes.legend()
    figure.tight_layout()
    path = directory / f"{report.pool.id}.regret.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def run_eval(
    dataset_dir: str | Path,
    prior: str | Path | None = None,
    view: str | None = None,
    plots: str | Path | None = None,
    out: Callable[[str], None] = print,
) -> list[PoolReport]:
    """`emmy eval`: prints the tables; returns the reports."""
    dataset = load_dataset(dataset_dir)
    directory = Path(prior) if prior else prior_dir()
    models = None
    if (directory / WEIGHTS).exists() or (directory / METADATA).exists() or prior:
        metadata, models = read_prior(directory)
        fitted_on = metadata.get("dataset", {}).get("sha256", "?")
        out(f"prior {directory} (fitted on dataset {fitted_on[:16]})")
        if fitted_on != dataset.sha256:
            out(
                f"  note: this dataset is {dataset.sha256[:16]}; held-out keys stay held out"
                " (the split is a hash of the key), but the data differ"
            )
    else:
        out(f"no prior at {directory}")
    reports = evaluate(dataset, models, view)
    for line in table_lines(reports):
        out(line)
    if plots:
        written = write_plots(reports, Path(plots))
        if written is None:
            out("emmy eval: matplotlib is not installed: no plots written (pip install matplotlib)")
        else:
            out(f"wrote {len(written)} plots to {plots}")
    return reports


def cmd_eval(args) -> int:
    run_eval(args.dataset, args.prior, args.view, args.plots)
    return 0


__all__ = ["run_eval", "evaluate", "score_key", "Summary", "PoolReport"]
