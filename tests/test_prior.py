"""The learned prior: features, fit (JAX), the numpy evaluator on the compile path, emmy eval.

Tests that fit need JAX, which only the `[fit]` extra installs; CI installs `.[test]`, so
they skip there ("emmy fit needs the [fit] extra"). Everything else runs without JAX: a
prior with made-up weights is written with numpy alone.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from emmy.base.errors import EmmyError
from emmy.base.problem_key import format_key, parse_key
from emmy.base.regime import regime_for
from emmy.cli import main
from emmy.dsl.library import declaration
from emmy.recall.prior import FamilyModel, load_prior, read_prior, write_prior
from emmy.recall.prior_features import FeatureSpec, load_dataset, split_of
from emmy.recall.tuning_db import TuningDB, canonical_config
from emmy.sites.fork_space import ForkSpace

SIZES = {"f32": 4, "f16": 2, "bf16": 2}
DEVICES = {
    # a GPU: wide, fast memory, prefers many threads and wide vectors
    "nvidia-h200-sm90": {"sms": 132, "bw": 3e12, "launch": 3e-6, "thread": 2e-10, "step": 4e-8},
    # the emulator: a few cores, every thread and every barrier costs tens of nanoseconds
    "emu": {"sms": 8, "bw": 8e9, "launch": 2e-5, "thread": 6e-8, "step": 1.5e-7},
}


def synthetic_time(family_name: str, key: dict, config: dict, device: str) -> float:
    """A made-up but structured cost of a row-wise kernel: launch, memory traffic (vector
    width, idle lanes), waves of blocks, per-thread overheads and the reduction tree."""
    d = DEVICES[device]
    rows, cols, size = key["rows"], key["cols"], SIZES[key["T"]]
    threads, rpb, vec = config["threads"], config["rows_per_block"], config["vec"]
    group = max(threads // rpb, 1)
    blocks = math.ceil(rows / rpb)
    passes = {"two_pass": 3.0, "online": 2.2, "one_pass": 2.0, "registers": 1.0}[config["algo"]]
    lanes_used = min(1.0, cols / (group * vec))
    vector = min(1.0, (vec * size / 16) ** 0.6)
    per_sm = max(1, 2048 // threads)
    waves = math.ceil(blocks / (d["sms"] * per_sm))
    memory = rows * cols * size * passes / (d["bw"] * vector * (0.3 + 0.7 * lanes_used))
    iterations = math.ceil(cols / (group * vec))
    reduction = math.log2(group) * (1.0 if config["reduction"] == "shuffle" else 2.5)
    compute = waves * (iterations * passes + 2 * reduction) * d["step"]
    threads_cost = blocks * threads * d["thread"] * (2 + reduction / 4)
    if config["algo"] == "online":
        compute *= 1.3 if cols < 512 else 0.8
    return d["launch"] + memory + compute + threads_cost


ROWS = [1, 2, 3, 4, 8, 16, 33, 64, 128, 256, 512, 1000, 2048, 4096, 8192]
COLS = [32, 60, 64, 100, 128, 250, 256, 384, 500, 512, 768, 1000, 1024, 2048, 3000, 4096, 8192]
POOLS = (("softmax", "nvidia-h200-sm90"), ("softmax", "emu"), ("layer_norm", "emu"))


def required(decl) -> list[str]:
    """The names of a family's key without a default: those every key of the data has."""
    return [n for n in decl.key if n not in decl.key_defaults]


def synthetic_dataset(directory: Path, pools=POOLS, n_keys: int = 48, seed: int = 0) -> Path:
    """A dataset as `emmy db export` writes it, from the real families' keys and valid
    configs and a made-up time; ~30 % of valid cells unmeasured, ~3 % failed (NaN)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"schema": 1, "created": "now", "sources": [], "pools": [], "features": {}}
    for family_name, device in pools:
        decl = declaration(family_name)
        keys: dict[str, dict] = {}
        while len(keys) < n_keys:
            key = {
                "rows": int(rng.choice(ROWS)),
                "cols": int(rng.choice(COLS)),
                "T": str(rng.choice(["f32", "f16", "bf16"])),
            }
            if "eps" in required(decl):
                key["eps"] = str(rng.choice(["1e-05", "1e-06"]))
            keys[format_key(required(decl), key)] = key
        texts = sorted(keys)
        by_cols: dict[int, list[dict]] = {}  # validity depends on cols alone here
        for k in texts:
            if keys[k]["cols"] not in by_cols:
                by_cols[keys[k]["cols"]] = list(ForkSpace.of(decl).configs(keys[k]))
        columns = sorted({canonical_config(c) for cs in by_cols.values() for c in cs})
        index = {c: j for j, c in enumerate(columns)}
        median = np.full((len(texts), len(columns)), np.nan)
        for i, k in enumerate(texts):
            for config in by_cols[keys[k]["cols"]]:
                if rng.random() < 0.33:
                    continue  # not measured, or failed
                t = synthetic_time(family_name, keys[k], config, device)
                median[i, index[canonical_config(config)]] = t * math.exp(rng.normal(0, 0.02))
        regime = regime_for(device)
        pool_id = f"{family_name}__{device}__{regime.id}"
        np.savez(
            directory / f"{pool_id}.npz", median_s=median, status=np.zeros(median.shape, np.int8)
        )
        clean = int(np.isfinite(median).sum())
        manifest["pools"].append(
            {
                "id": pool_id,
                "family": family_name,
                "device": device,
                "regime": regime.id,
                "regime_words": regime.words,
                "file": f"{pool_id}.npz",
                "keys": texts,
                "configs": columns,
                "rows": clean,
                "clean": clean,
            }
        )
        manifest["features"][family_name] = {
            "key": {
                n: "int" if isinstance(decl.example[n], int) else "symbol" for n in required(decl)
            },
            "config": {f.name: "symbol" if f.is_symbolic else "int" for f in decl.forks},
        }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return directory


def library_spec(family_name: str, devices=("emu",)) -> FeatureSpec:
    """A family's feature layout from its declaration alone (what a fit would build)."""
    decl = declaration(family_name)
    ints = tuple(n for n in required(decl) if isinstance(decl.example[n], int))
    symbols = {
        n: ("bf16", "f16", "f32") if n == "T" else ("1e-05",)
        for n in required(decl)
        if n not in ints
    }
    return FeatureSpec(
        family=family_name,
        key_ints=ints,
        key_symbols=symbols,
        fork_ints=tuple(f.name for f in decl.forks if not f.is_symbolic),
        fork_symbols={f.name: tuple(map(str, f.options)) for f in decl.forks if f.is_symbolic},
        devices=tuple(devices),
        forks=tuple(f.name for f in decl.forks),
    )


def numpy_prior(directory: Path, families=("softmax",), devices=("emu",), seed=0) -> Path:
    """A prior with made-up weights, written with numpy alone (no JAX)."""
    rng = np.random.default_rng(seed)
    models = {}
    for name in families:
        spec = library_spec(name, devices)
        layers = (
            (rng.standard_normal((spec.size, 8)), rng.standard_normal(8)),
            (rng.standard_normal((8, 1)), np.zeros(1)),
        )
        ones = np.ones(spec.size)
        models[name] = FamilyModel(spec, (layers,), ones * 0.5, ones, -9.0, 1.0)
    metadata = {
        "dataset": {"sha256": "d" * 64},
        "architecture": {"hidden": [8], "activation": "relu", "ensemble": 1},
    }
    write_prior(directory, models, metadata)
    return directory


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("emmy: error: "), err
    return err[0]


# --- features -----------------------------------------------------------------------------


def test_features_are_named_stable_and_numpy_only() -> None:
    spec = library_spec("softmax", devices=("emu", "nvidia-h200-sm90"))
    key = parse_key("rows=8,cols=1000,T=f16")
    config = {"threads": 256, "rows_per_block": 2, "vec": 8, "algo": "online", "reduction": "smem"}
    (row,) = spec.matrix("emu", [key], [config])
    features = dict(zip(spec.names, row[0], strict=True))
    assert len(features) == spec.size == 2 + 3 + 3 + 5 + 2 * 3 * 3 + 2
    assert features["key:rows"] == math.log2(9) and features["key:cols"] == math.log2(1001)
    assert features["key:T=f16"] == 1 and features["key:T=f32"] == 0
    assert features["config:vec"] == math.log2(9) and features["config:algo=online"] == 1
    assert features["log2 ceil(rows/rows_per_block)"] == 2
    assert features["cols%vec==0"] == 1 and features["cols%threads==0"] == 0
    assert features["log2 ceil(cols/threads)"] == 2
    assert features["log2 pad(cols/threads)"] == pytest.approx(math.log2(1024 / 1000))
    assert features["device=emu"] == 1 and features["device=nvidia-h200-sm90"] == 0
    # the layout survives the metadata round trip; an unknown symbol is all zeros
    again = FeatureSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert np.array_equal(again.matrix("emu", [key], [config]), spec.matrix("emu", [key], [config]))
    odd = spec.matrix("emu", [{**key, "T": "f8"}], [config])[0, 0]
    assert not any(odd[spec.names.index(f"key:T={t}")] for t in ("bf16", "f16", "f32"))
    # the split is a hash of (family, key): the same on every run and machine
    assert split_of("softmax", "rows=8,cols=1000,T=f16") == split_of(
        "softmax", "rows=8,cols=1000,T=f16"
    )


def test_fork_pair_features_see_the_ceiling_of_a_product() -> None:
    spec = replace(library_spec("softmax"), fork_pairs=True)
    key = parse_key("rows=8,cols=1000,T=f32")
    config = {"threads": 256, "rows_per_block": 2, "vec": 8, "algo": "online", "reduction": "smem"}
    features = dict(zip(spec.names, spec.matrix("emu", [key], [config])[0, 0], strict=True))
    assert len(features) == spec.size == library_spec("softmax").size + 2 * 3 * 2
    # a row of 1000 over 256 threads of 8 lanes: one pass, 1048 lanes of waste
    assert features["log2 ceil(cols/(threads*vec))"] == 0
    assert features["log2 pad(cols/(threads*vec))"] == pytest.approx(math.log2(2048 / 1000))
    assert features["log2 ceil(rows/(threads*rows_per_block))"] == 0
    again = FeatureSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again.fork_pairs and again.names == spec.names
    # a layout written before pairs existed reads as one without them
    doc = {k: v for k, v in library_spec("softmax").to_json().items() if k != "fork_pairs"}
    assert not FeatureSpec.from_json(doc).fork_pairs


def test_dataset_hash_ignores_when_and_where_it_was_exported(tmp_path) -> None:
    directory = synthetic_dataset(tmp_path / "data", pools=POOLS[:1], n_keys=6)
    first = load_dataset(directory).sha256
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["created"], manifest["database"] = "later", "/elsewhere.db"
    (directory / "manifest.json").write_text(json.dumps(manifest))
    assert load_dataset(directory).sha256 == first
    npz = directory / manifest["pools"][0]["file"]
    with np.load(npz) as data:
        median = data["median_s"].copy()
    median[0, np.flatnonzero(np.isfinite(median[0]))[0]] *= 2
    np.savez(npz, median_s=median)
    assert load_dataset(directory).sha256 != first


# --- the evaluator on the compile path ----------------------------------------------------


def test_no_prior_or_another_device_decides_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMMY_PRIOR_DIR", str(tmp_path / "empty"))
    assert load_prior("emu") is None
    monkeypatch.setenv("EMMY_PRIOR_DIR", str(numpy_prior(tmp_path / "prior")))
    assert load_prior("nvidia-h200-sm90") is None  # no training data on that device
    assert load_prior("emu") is not None


def test_the_prior_takes_only_keys_with_the_names_it_was_fitted_on() -> None:
    spec = library_spec("softmax")
    key = parse_key("rows=8,cols=1000,T=f32")
    config = dict(ForkSpace.of(declaration("softmax")).declared)
    assert spec.accepts(key, config)
    # e.g. a matmul's `split`: features without it would predict the unsplit kernel
    assert not spec.accepts({**key, "split": 4}, config)
    assert not spec.accepts({n: v for n, v in key.items() if n != "cols"}, config)
    assert not spec.accepts(key, {**config, "extra": 1})
    # a name the fit never saw is taken at its declared default, which every key of the fit had
    decl = declaration("matmul")
    spec = replace(library_spec("matmul"), key_defaults=dict(decl.key_defaults))
    assert "split" not in spec.key_names and spec.key_defaults["split"] == 1
    key = {n: 64 if isinstance(v, int) else v for n, v in decl.example.items() if n != "split"}
    config = dict(ForkSpace.of(decl).declared)
    assert spec.accepts(key, config) and spec.accepts({**key, "split": 1}, config)
    assert not spec.accepts({**key, "split": 4}, config)


COMPILE = """
import json, sys
sys.path.insert(0, {tests!r})
from stores import softmax_program
program = softmax_program({db!r}, oracles="prior,default")
(provenance,) = program.provenance.values()
(info,) = program.kernels.values()
print(json.dumps({{"provenance": provenance.to_json(), "config": info.config,
                  "jax": any(m == "jax" or m.startswith("jax.") for m in sys.modules)}}))
"""


def compile_in_subprocess(tmp_path: Path, env: dict) -> dict:
    """COMPILE run in a fresh interpreter (so jax imports are seen); what it printed last."""
    script = COMPILE.format(tests=str(Path(__file__).parent), db=str(tmp_path / "autotune.db"))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_compile_with_a_prior_records_its_prediction_and_never_imports_jax(tmp_path) -> None:
    prior = numpy_prior(tmp_path / "prior")
    env = {**os.environ, "EMMY_PRIOR_DIR": str(prior)}
    out = compile_in_subprocess(tmp_path, env)
    assert out["jax"] is False
    provenance = out["provenance"]
    assert provenance["oracle"] == "prior"
    assert set(provenance["forks"].values()) == {"prior"}
    evidence, runner_up = provenance["evidence"], provenance["runner_up"]
    assert evidence["dataset"] == "d" * 64
    assert runner_up["predicted_s"] >= evidence["predicted_s"] > 0
    assert runner_up["config"] != out["config"]
    # the pick is the numpy model's fastest of every valid config
    _, models = read_prior(prior)
    key = parse_key("rows=8,cols=64,T=f32")
    valid = list(ForkSpace.of(declaration("softmax")).configs(key))
    predicted = np.exp(models["softmax"].predict_log("emu", [key], valid)[0])
    assert evidence["configs_scored"] == len(valid)
    assert out["config"] == valid[int(np.argmin(predicted))]
    assert evidence["predicted_s"] == pytest.approx(float(predicted.min()))


def test_a_corrupt_prior_is_one_error_naming_the_file(tmp_path, monkeypatch, capsys) -> None:
    prior = numpy_prior(tmp_path / "prior")
    monkeypatch.setenv("EMMY_PRIOR_DIR", str(prior))
    weights = prior / "weights.npz"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(EmmyError, match=f"^{weights}: .*corrupt") as raised:
        load_prior("emu")
    assert "\n" not in str(raised.value)
    # garbage that the metadata vouches for is still refused, naming the file
    metadata = json.loads((prior / "metadata.json").read_text())
    weights.write_bytes(b"not a zip file")
    metadata["weights_sha256"] = __import__("hashlib").sha256(b"not a zip file").hexdigest()
    (prior / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(EmmyError, match=f"^{weights}: not a readable weights file"):
        load_prior("emu")
    # through the command line: one line, exit status 2
    data = synthetic_dataset(tmp_path / "data", pools=POOLS[1:2], n_keys=4)
    assert main(["eval", "--dataset", str(data), "--prior", str(prior)]) == 2
    assert str(weights) in _one_line_error(capsys)
    (prior / "metadata.json").unlink()
    with pytest.raises(EmmyError, match=r"metadata.json: missing"):
        load_prior("emu")


# --- emmy eval ----------------------------------------------------------------------------


def exported_dataset(tmp_path: Path) -> Path:
    """A dataset written by `emmy db export` from planted softmax rows on emu."""
    regime = regime_for("emu")
    decl = declaration("softmax")
    rng = np.random.default_rng(1)
    rows = []
    for rows_n in (1, 4, 16, 64, 256, 1024):
        for cols in (64, 100, 256, 1000):
            key = {"rows": rows_n, "cols": cols, "T": "f32"}
            valid = list(ForkSpace.of(decl).configs(key))
            for index in rng.choice(len(valid), 12, replace=False):
                config = valid[index]
                time_s = synthetic_time("softmax", key, config, "emu")
                rows.append(_row(format_key(required(decl), key), config, time_s, regime))
            rows.append(
                _row(
                    format_key(required(decl), key), dict(ForkSpace.of(decl).declared), None, regime
                )
            )
    db = tmp_path / "dataset.db"
    with TuningDB(db) as store:
        store.add(rows)
    out = tmp_path / "dataset"
    assert main(["db", "export", "--db", str(db), "-o", str(out)]) == 0
    return out


def _row(key: str, config: dict, median_s: float | None, regime):
    from emmy.recall.tuning_db import Row

    return Row(
        device="emu",
        regime=regime.id,
        regime_words=regime.words,
        compiler="g++ test",
        family="softmax",
        key=key,
        config=config,
        origin="forced",
        status="ok" if median_s else "timeout",
        median_s=median_s,
        repetitions=5,
        bench="planted",
    )


def test_emmy_eval_prints_coverage_and_scores_per_pool(tmp_path, capsys, monkeypatch) -> None:
    from stores import write_golden

    from emmy.recall import golden

    data = exported_dataset(tmp_path)
    capsys.readouterr()
    prior = numpy_prior(tmp_path / "prior")
    # a golden file with an entry for one held-out key: its second-fastest measured config
    (pool_doc,) = json.loads((data / "manifest.json").read_text())["pools"]
    with np.load(data / pool_doc["file"]) as npz:
        median = npz["median_s"]
    i = next(i for i, k in enumerate(pool_doc["keys"]) if split_of("softmax", k) == "held_out")
    second = np.argsort(np.where(np.isfinite(median[i]), median[i], np.inf))[1]
    entry = {
        "family": "softmax",
        "key": pool_doc["keys"][i],
        "config": json.loads(pool_doc["configs"][second]),
        "median_s": float(median[i, second]),
        "promoted_from": {},
    }
    monkeypatch.setattr(golden, "MODEL_AGNOSTIC_DIR", tmp_path / "golden")
    write_golden(tmp_path / "golden" / "emu.json", [entry])
    assert main(["eval", "--dataset", str(data), "--prior", str(prior)]) == 0
    out = capsys.readouterr().out
    pool = f"softmax__emu__{regime_for('emu').id}"
    assert f"prior {prior} (fitted on dataset dddddddddddddddd)" in out
    assert f"{pool}: softmax on emu, regime {regime_for('emu').id}" in out
    lines = out.splitlines()
    coverage = next(line for line in lines if "coverage:" in line)
    assert "24 keys (" in coverage and "% of cells measured" in coverage
    header = next(line for line in lines if line.split()[:1] == ["picker"])
    assert header.split() == [
        "picker",
        "keys",
        "scored",
        "missing",
        "top-1",
        "top-5",
        "mean",
        "regret",
        "worst",
    ]
    pickers = {line.split()[0] for line in lines[lines.index(header) :] if line.startswith("  ")}
    assert {"prior", "default", "nearest", "golden"} <= pickers
    assert "golden entries for 1 of 24 keys" in coverage
    golden_row = next(line.split() for line in lines if line.startswith("  golden "))
    best = float(np.nanmin(median[i]))
    assert golden_row[1:4] == ["1", "1", "0"]
    assert float(golden_row[4]) == pytest.approx(best / float(median[i, second]), abs=1e-3)
    # the default's scores are those of the declared default (moved by constraints)
    (report,) = __import__("emmy.fitting.prior_eval", fromlist=["x"]).evaluate(
        load_dataset(data), read_prior(prior)[1]
    )
    default = report.pickers["default"]
    assert default.keys == len(report.held_out) > 0
    assert default.missing == default.keys  # the default config's every row timed out
    # a view selects pools; an unknown one is one line
    assert main(["eval", "softmax", "--dataset", str(data), "--prior", str(prior)]) == 0
    capsys.readouterr()
    assert main(["eval", "matmul", "--dataset", str(data)]) == 2
    assert "no pool, family or device 'matmul'" in _one_line_error(capsys)
    # plots: PNGs with matplotlib (the test extra has it), else one line saying it is missing
    plots = tmp_path / "plots"
    assert main(["eval", "--dataset", str(data), "--prior", str(prior), "--plots", str(plots)]) == 0
    assert f"wrote 2 plots to {plots}" in capsys.readouterr().out
    for kind in ("predicted", "regret"):
        assert (plots / f"{pool}.{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    unplotted = tmp_path / "unplotted"
    assert (
        main(["eval", "--dataset", str(data), "--prior", str(prior), "--plots", str(unplotted)])
        == 0
    )
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not unplotted.exists()


def test_fit_without_jax_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    data = synthetic_dataset(tmp_path / "data", pools=POOLS[1:2], n_keys=4)
    assert main(["fit", "--dataset", str(data), "-o", str(tmp_path / "prior")]) == 2
    assert _one_line_error(capsys) == "emmy: error: emmy fit needs JAX: pip install -e '.[fit]'"


# --- fitting (needs JAX: the [fit] extra) -------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The synthetic dataset and a prior fitted on it through `emmy fit`."""
    pytest.importorskip("jax", reason="emmy fit needs the [fit] extra")
    base = tmp_path_factory.mktemp("fitted")
    data = synthetic_dataset(base / "data", n_keys=60)
    prior = base / "prior"
    assert main(["fit", "--dataset", str(data), "-o", str(prior), "--epochs", "25"]) == 0
    return data, prior


def test_fit_beats_the_default_and_the_nearest_key_on_held_out_keys(fitted) -> None:
    from emmy.fitting.prior_eval import Summary, evaluate

    data, prior = fitted
    metadata, models = read_prior(prior)
    dataset = load_dataset(data)
    assert metadata["dataset"]["sha256"] == dataset.sha256
    assert set(metadata["metrics"]) == {p.id for p in dataset.pools}
    reports = evaluate(dataset, models)
    merged = {
        name: Summary.of([k for r in reports for k in r.pickers[name].scores])
        for name in ("prior", "default", "nearest key")
    }
    prior_s, default_s, nearest_s = merged["prior"], merged["default"], merged["nearest key"]
    assert prior_s.scored >= 15
    assert prior_s.top1 > nearest_s.top1 > default_s.top1
    assert prior_s.top5 > nearest_s.top5
    assert prior_s.mean_regret < nearest_s.mean_regret
    # the metadata's metrics are these same numbers
    for report in reports:
        assert metadata["metrics"][report.pool.id]["prior"] == report.pickers["prior"].to_json()


def test_the_numpy_evaluator_equals_the_jax_model(fitted) -> None:
    pytest.importorskip("jax", reason="emmy fit needs the [fit] extra")
    from emmy.fitting.prior_fit import predict_log_jax

    data, prior = fitted
    _, models = read_prior(prior)
    dataset = load_dataset(data)
    for pool in dataset.pools:
        model = models[pool.family]
        keys = pool.parsed_keys[:8]
        configs_ = pool.parsed_configs
        ours = model.predict_log(pool.device, keys, configs_)
        theirs = predict_log_jax(model, pool.device, keys, configs_)
        assert ours.shape == (len(keys), len(configs_))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


def test_a_refit_is_the_same_bytes(tmp_path) -> None:
    pytest.importorskip("jax", reason="emmy fit needs the [fit] extra")
    data = synthetic_dataset(tmp_path / "data", pools=POOLS[1:2], n_keys=12)
    fits = [tmp_path / "one", tmp_path / "two"]
    for out in fits:
        assert main(["fit", "--dataset", str(data), "-o", str(out), "--epochs", "3"]) == 0
    for name in ("weights.npz", "metadata.json"):
        assert (fits[0] / name).read_bytes() == (fits[1] / name).read_bytes()


def test_the_committed_prior_decides_emu_sites_from_a_fresh_checkout(capsys, tmp_path) -> None:
    """The prior fitted on _data/dataset (benches on emu) ships in the package: with no
    golden file and an empty database it is what decides an emu softmax."""
    from emmy.base.paths import PRIOR_DIR

    assert (PRIOR_DIR / "weights.npz").is_file() and (PRIOR_DIR / "metadata.json").is_file()
    env = {k: v for k, v in os.environ.items() if k != "EMMY_PRIOR_DIR"}
    out = compile_in_subprocess(tmp_path, env)
    assert out["jax"] is False
    assert out["provenance"]["oracle"] == "prior"
    metadata = json.loads((PRIOR_DIR / "metadata.json").read_text())
    assert out["provenance"]["evidence"]["dataset"] == metadata["dataset"]["sha256"]


def committed_dataset():
    return load_dataset(Path(__file__).parent.parent / "_data" / "dataset")


def test_emmy_eval_does_not_score_a_host_level_choice(capsys) -> None:
    """The committed dataset's matmul_path pool (a row per matmul key: the option it picked)
    mixes the keys of two families; a choice's option is timed as the sum of its kernels'
    rows, so `emmy eval` says why it scores nothing there."""
    assert main(["eval", "matmul_path", "--dataset", str(committed_dataset().path)]) == 0
    assert "not scored: a host-level choice" in capsys.readouterr().out


def test_the_mean_per_pool_weighs_each_pool_once_and_a_tie_is_no_win(capsys) -> None:
    from emmy.fitting.prior_eval import PoolReport, Summary, mean_top1_per_pool, prior_wins

    def report(prior, default, nearest) -> PoolReport:
        top1 = {"prior": prior, "default": default, "nearest key": nearest, "golden": None}
        pickers = {name: Summary(top1=value) for name, value in top1.items()}
        return PoolReport(None, [], 0.0, 0, pickers)

    reports = [
        report(0.9, 0.5, 0.95),  # the nearest key is better
        report(1.0, 0.4, 1.0),  # a tie
        report(0.8, None, 0.7),  # no default scored: the nearest key is the only rival
        report(None, 0.3, 0.3),  # a host-level choice: the prior is not scored
    ]
    means = mean_top1_per_pool(reports)
    assert means["prior"] == pytest.approx((0.9, 3))
    assert means["default"] == pytest.approx((0.4, 3))
    assert means["nearest key"] == pytest.approx(((0.95 + 1.0 + 0.7 + 0.3) / 4, 4))
    assert "golden" not in means
    assert prior_wins(reports) == (1, 3)
    # the command prints it for the committed dataset and prior, after the pools' tables
    from emmy.base.paths import PRIOR_DIR

    dataset = str(committed_dataset().path)
    assert main(["eval", "emu", "--dataset", dataset, "--prior", str(PRIOR_DIR)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("mean per pool (each scored pool counts once):")
    assert lines[start + 1].split()[:2] == ["prior", "top-1"]
    assert "better than default and nearest key in" in lines[start + 1]


def test_emmy_fit_skips_host_level_choices() -> None:
    pytest.importorskip("jax", reason="emmy fit needs the [fit] extra")
    from emmy.fitting.prior_fit import deployable_pools

    dataset = committed_dataset()
    _, skipped = deployable_pools(dataset)
    for pool in dataset.pools:
        if pool.family in ("matmul_path", "attention_path"):
            assert "host-level choice" in skipped[pool.id]
