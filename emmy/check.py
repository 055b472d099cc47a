"""Correctness of every option of the kernel library: pairwise variants of each family,
run on a device against the float64 references of emmy.search.reference.

Options are covered pairwise over the shapes and forks together (each option at least once,
every pair of options together); all variants of a family and dtype share one source, so a
case costs one compiler invocation and one device run. The test suite runs the cases on the
emulator; scripts/gpu-check runs the same cases on a GPU.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from emmy import dtypes
from emmy.compiler import TensorSpec, compile_variants, poisoned
from emmy.dsl.keys import param_dtype, parse_input_kinds
from emmy.dsl.library import active_params, configs, family
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.device import BufferArg, Device, Launch
from emmy.search.reference import as_outputs, reference, tolerance


def pairwise(candidates: list[dict]) -> list[dict]:
    """A small subset covering every option and every pair of options the set contains."""
    if not candidates:
        return []
    names = list(candidates[0])

    def pairs(config: dict) -> set:
        items = [(n, config[n]) for n in names]
        return set(itertools.combinations(items, 2)) | {(i,) for i in items}

    uncovered = set().union(*(pairs(c) for c in candidates))
    chosen = []
    while uncovered:
        best = max(candidates, key=lambda c: len(pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


FLOATS = list(dtypes.FLOAT_NAMES)
#: families that take fewer storage types (tensor cores multiply 16-bit floats)
DTYPES = {family: list(dtypes.HALF_NAMES) for family in ("matmul_tc", "attention_tc")}


def dtypes_of(family_name: str) -> list[str]:
    return DTYPES.get(family_name, FLOATS)


def randn(shape, dtype: str, generator: torch.Generator, scale: float = 1.0, shift: float = 0.0):
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift
    return values.to(dtypes.torch_dtype(dtype))


def softmax_input(rows: int, cols: int, dtype: str, generator: torch.Generator) -> torch.Tensor:
    """Inputs that stress a softmax: magnitudes whose exp overflows unless the row maximum
    is subtracted, -inf entries, and (with 3 rows or more) a row of -inf, NaN as in torch."""
    x = randn((rows, cols), "f32", generator, 3.0).double()
    big = {"f32": 1e4, "f16": 3e4, "bf16": 1e4}[dtype]
    x[0, cols // 2] = big
    if cols > 3:
        x[-1, 1] = -big
        x[0, 2] = -math.inf
    if rows > 2:
        x[1, :] = -math.inf
    return x.to(dtypes.torch_dtype(dtype))


def attention_mask(key: dict, dtype: str, generator: torch.Generator) -> torch.Tensor:
    """A padding mask [batch, kv_len], or with `mask_rows` a mask per query [batch, q_len,
    kv_len]: the padding mask plus a causal one (what a Hugging Face model builds), each
    query seeing at least its first key."""
    padding = padding_mask(key["batch"], key["kv_len"], dtype, generator)
    rows = key.get("mask_rows", 1)
    if rows == 1:
        return padding
    hidden = torch.ones(rows, key["kv_len"], dtype=torch.bool).triu(1)
    causal = torch.zeros(rows, key["kv_len"]).masked_fill(hidden, -math.inf)
    return (padding.double()[:, None, :] + causal).to(padding.dtype)


def padding_mask(batch: int, kv_len: int, dtype: str, generator: torch.Generator):
    """An additive mask per (batch, key): small values where a key is read, -inf on the
    padding (a third of the keys of the first batch, all but the first of the last)."""
    mask = torch.randn((batch, kv_len), generator=generator, dtype=torch.float64) * 0.5
    mask[0, kv_len - kv_len // 3 :] = -math.inf
    mask[-1, 1:] = -math.inf
    return mask.to(dtypes.torch_dtype(dtype))


#: fused matmul epilogues: (chain over the product `acc`, kinds of its extra inputs)
EPILOGUES = [
    ("acc", ""),
    ("gelu((acc + in0))", "row"),
    ("(relu(acc) * in0)", "scalar"),
    ("((silu(acc) + in0) + in1)", "full/col"),
]


def matmul_key(
    dtype: str,
    z: int,
    zb: int,
    m: int,
    n: int,
    k: int,
    layout: str | None,
    epilogue: str = "acc",
    inputs: str = "",
    split: int = 1,
) -> dict:
    """A matmul key (layout None: the tensor-core family's, B stored [k, n])."""
    key: dict = {"batch": z, "m": m, "n": n, "k": k, "b_batch": zb}
    if layout is not None:
        rows, cols = (k, n) if layout == "kn" else (n, k)
        key |= {"b_rows": rows, "b_cols": cols, "layout": layout}
    key |= {"T": dtype, "epilogue": epilogue, "inputs": inputs}
    return key | ({"split": split} if split > 1 else {})


def epilogue_inputs(key: dict, dtype: str, generator: torch.Generator) -> list[torch.Tensor]:
    """Random extra inputs of a matmul's epilogue, each with the shape its kind reads."""
    rows, cols = key["batch"] * key["m"], key["n"]
    sizes = {"full": rows * cols, "row": cols, "col": rows, "scalar": 1}
    kinds = parse_input_kinds(str(key["inputs"]))
    return [randn((sizes[kind],), dtype, generator) for kind in kinds]


#: fused row kernels: (rows, cols, kinds of the inputs, chain of x, epilogue, store x)
FUSED_ROWS = [
    (5, 96, "full/full/row", "(in0 + in1)", "gelu((acc * in2))", "yes"),
    (3, 40, "full/col", "(in0 * in1)", "(acc + in0)", "no"),
    (4, 24, "full/scalar", "(in0 - in1)", "acc", "yes"),
]


def _fused_keys(dtype: str, extra: dict) -> list[dict]:
    return [
        {"rows": r, "cols": c, "T": dtype, **extra, "inputs": kinds, "fn": fn}
        | {"epilogue": epilogue, "store": store}
        for r, c, kinds, fn, epilogue, store in FUSED_ROWS
    ]


def _norm_keys(dtype: str, extra: dict) -> list[dict]:
    plain = [
        {"rows": r, "cols": c, "T": dtype, **extra} for r, c in [(3, 1), (2, 7), (5, 96), (2, 1000)]
    ]
    return plain + _fused_keys(dtype, extra)


def _row_inputs(key: dict, dtype: str, generator: torch.Generator, params: int) -> list:
    """The inputs of a (fused) row kernel's chain, each with the shape its kind reads (the
    first shifted and scaled, so that a mean and a variance matter), then a norm's weight
    (and bias)."""
    rows, cols = key["rows"], key["cols"]
    shapes = {"full": (rows, cols), "row": (cols,), "col": (rows, 1), "scalar": (1,)}
    kinds = parse_input_kinds(str(key.get("inputs", "full")))
    ins = [randn(shapes[kind], dtype, generator) for kind in kinds]
    ins[0] = randn(shapes[kinds[0]], dtype, generator, 2.0, 0.5)
    return ins + [randn((cols,), dtype, generator) for _ in range(params)]


def _view(dims: tuple[int, ...], strides: tuple[int, ...]) -> dict:
    """A view's sizes and strides as the permute family's key: 4 dims, leading sizes 1."""
    dims, strides = (1,) * (4 - len(dims)) + dims, (0,) * (4 - len(strides)) + strides
    return {
        **{f"d{i}": d for i, d in enumerate(dims)},
        **{f"s{i}": s for i, s in enumerate(strides)},
    }


# (storage size, view sizes, view strides, storage offset)
PERMUTE_VIEWS = [
    # [b, s, h, d] -> [b, h, s, d] with d = 6: vectors of 1 and 2
    (2 * 7 * 3 * 6, (2, 3, 7, 6), (126, 6, 18, 1), 0),
    # the same with d = 8: vectors of up to 8
    (2 * 5 * 3 * 8, (2, 3, 5, 8), (120, 8, 24, 1), 0),
    # [37, 19] -> [19, 37]
    (37 * 19, (19, 37), (1, 19), 0),
    # x[:, 10:20] of a [4, 30] tensor
    (4 * 30, (4, 10), (30, 1), 10),
    # [5, 1, 12] expanded to [5, 3, 12], and [4, 1] expanded to [4, 7]
    (5 * 12, (5, 3, 12), (12, 0, 1), 0),
    (4, (4, 7), (1, 0), 0),
]


# (bh, kv_bh, q_len, kv_len, d, causal, scale, mask batch or 0, mask per query too)
ATTENTION_SHAPES = [
    (1, 1, 1, 1, 4, "no", "0.5", 0, False),
    (2, 2, 13, 13, 64, "yes", "0.125", 0, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 0, False),
    (4, 1, 33, 33, 128, "yes", "0.08838835", 0, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 2, False),
    (4, 4, 9, 9, 64, "yes", "0.125", 2, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 2, True),
    (4, 2, 11, 11, 64, "no", "0.125", 2, True),
    # a mask per head: its groups are the bh heads
    (4, 2, 6, 9, 32, "yes", "0.17677669", 4, True),
]
# more rows than one block of queries, a causal block that stops early, fewer queries
# than keys under a causal mask and a mask per query
ATTENTION_TC_SHAPES = [
    (2, 1, 70, 70, 16, "yes", "0.25", 0, False),
    (2, 2, 5, 100, 32, "yes", "0.17677669", 2, True),
]


def _attention_keys(dtype: str, shapes: list[tuple]) -> list[dict]:
    return [
        {
            "bh": bh,
            "kv_bh": kv,
            "q_len": ql,
            "kv_len": kl,
            "d": d,
            "T": dtype,
            "causal": c,
            "scale": sc,
            **({"masked": "yes", "batch": batch} if batch else {}),
            **({"mask_rows": ql} if per_query else {}),
        }
        for bh, kv, ql, kl, d, c, sc, batch, per_query in shapes
    ]


def _attention_inputs(key: dict, dtype: str, generator: torch.Generator) -> list[torch.Tensor]:
    return [
        randn((key["bh"], key["q_len"], key["d"]), dtype, generator),
        randn((key["kv_bh"], key["kv_len"], key["d"]), dtype, generator),
        randn((key["kv_bh"], key["kv_len"], key["d"]), dtype, generator),
        *([attention_mask(key, dtype, generator)] if "masked" in key else []),
    ]


CHAIN = "((gelu((in0 * in1)) + silu((in2 - in3))) / (2.0 + exp(tanh(in0)))) - relu(gelu_tanh(in1))"

# family -> (keys of the shapes to test, inputs of a key); the outputs' shapes are the
# reference's
SPECS = {
    "softmax": (
        lambda dtype: (
            [
                {"rows": r, "cols": c, "T": dtype}
                for r, c in [(3, 1), (2, 7), (5, 97), (4, 130), (1, 4096), (2, 1000)]
            ]
            + _fused_keys(dtype, {})
            # causal rows of the unfused attention path: 3 queries over 5 keys, 4 over 4
            + [
                {"rows": 6, "cols": 5, "T": dtype, "causal": 3, "fn": "(in0 * 0.5)"},
                {"rows": 8, "cols": 4, "T": dtype, "causal": 4},
            ]
        ),
        lambda k, d, g: (
            _row_inputs(k, d, g, 0) if "fn" in k else [softmax_input(k["rows"], k["cols"], d, g)]
        ),
    ),
    "elementwise": (
        lambda dtype: [
            {"n": r * c, "cols": c, "T": dtype, "inputs": "full/row/col/scalar", "fn": CHAIN}
            for r, c in [(1, 1), (7, 13), (3, 64), (5, 120)]
        ],
        lambda k, d, g: [
            randn((k["n"] // k["cols"], k["cols"]), d, g),
            randn((k["cols"],), d, g),
            randn((k["n"] // k["cols"], 1), d, g),
            randn((1,), d, g),
        ],
    ),
    "layer_norm": (
        lambda dtype: _norm_keys(dtype, {"eps": "1e-05"}),
        lambda k, d, g: _row_inputs(k, d, g, 2),
    ),
    "rms_norm": (
        lambda dtype: _norm_keys(dtype, {"eps": "1e-06"}),
        lambda k, d, g: _row_inputs(k, d, g, 1),
    ),
    "reduce_rows": (
        lambda dtype: [
            {"rows": r, "cols": c, "T": dtype, "op": op}
            for (r, c), op in zip(
                [(3, 1), (5, 97), (2, 1000), (4, 64)], ["sum", "mean", "max", "sum"], strict=True
            )
        ],
        lambda k, d, g: [randn((k["rows"], k["cols"]), d, g)],
    ),
    "transpose": (
        lambda dtype: [
            {"rows": r, "cols": c, "T": dtype} for r, c in [(1, 1), (37, 70), (64, 16), (3, 130)]
        ],
        lambda k, d, g: [randn((k["rows"], k["cols"]), d, g)],
    ),
    "matmul": (
        lambda dtype: (
            [
                matmul_key(dtype, z, zb, m, n, k, layout, e, kinds)
                for z, zb, m, n, k, layout, (e, kinds) in zip(
                    [1, 2, 1, 3],
                    [1, 2, 1, 1],
                    [1, 37, 64, 130],
                    [1, 50, 128, 20],
                    [1, 29, 96, 33],
                    ["kn", "nk", "kn", "nk"],
                    EPILOGUES,
                    strict=True,
                )
            ]
            # split-K parts: slices of 8 (the last 3 of 8 empty), of 48 (the last ragged)
            + [
                matmul_key(dtype, 2, 1, 37, 50, 40, "nk", split=8),
                matmul_key(dtype, 1, 1, 70, 20, 140, "kn", split=3),
            ]
        ),
        lambda key, d, g: [
            randn((key["batch"], key["m"], key["k"]), d, g),
            randn((key["b_batch"], key["b_rows"], key["b_cols"]), d, g),
            *epilogue_inputs(key, d, g),
        ],
    ),
    "matmul_tc": (
        lambda dtype: (
            [
                matmul_key(dtype, z, zb, m, n, k, None, e, kinds)
                for (z, zb, m, n, k), (e, kinds) in zip(
                    [
                        (1, 1, 16, 8, 16),
                        (2, 2, 37, 48, 40),
                        (1, 1, 128, 136, 96),
                        (3, 1, 70, 24, 200),
                    ],
                    EPILOGUES,
                    strict=True,
                )
            ]
            + [
                matmul_key(dtype, 2, 1, 37, 48, 40, None, split=8),
                matmul_key(dtype, 1, 1, 70, 24, 136, None, split=3),
            ]
        ),
        lambda key, d, g: [
            randn((key["batch"], key["m"], key["k"]), d, g),
            randn((key["b_batch"], key["k"], key["n"]), d, g),
            *epilogue_inputs(key, d, g),
        ],
    ),
    "split_sum": (
        lambda dtype: [
            {"split": split, "size": rows * n, "n": n, "T": dtype, "epilogue": e, "inputs": kinds}
            for (split, rows, n), (e, kinds) in zip(
                [(2, 1, 1), (3, 37, 50), (8, 4, 128), (4, 3, 20)], EPILOGUES, strict=True
            )
        ],
        lambda k, d, g: [
            randn((k["split"], k["size"]), "f32", g),
            *epilogue_inputs({**k, "m": k["size"] // k["n"], "batch": 1}, d, g),
        ],
    ),
    "attention": (
        lambda dtype: _attention_keys(dtype, ATTENTION_SHAPES),
        lambda key, d, g: _attention_inputs(key, d, g),
    ),
    "attention_tc": (
        lambda dtype: _attention_keys(
            dtype, [shape for shape in ATTENTION_SHAPES if shape[4] % 16 == 0] + ATTENTION_TC_SHAPES
        ),
        lambda key, d, g: _attention_inputs(key, d, g),
    ),
    "rope": (
        lambda dtype: [
            {"tokens": t, "seq": s, "heads": h, "dim": 2 * half, "half": half, "T": dtype}
            for t, s, h, half in [(1, 1, 1, 1), (10, 5, 3, 12), (9, 9, 2, 64)]
        ],
        lambda k, d, g: [
            randn((k["tokens"], k["heads"], k["dim"]), d, g),
            randn((k["seq"], k["half"]), d, g),
            randn((k["seq"], k["half"]), d, g),
        ],
    ),
    "embedding": (
        lambda dtype: [
            {"tokens": t, "vocab": v, "dim": dm, "T": dtype, "I": i}
            for t, v, dm, i in [(1, 3, 1, "i64"), (13, 50, 24, "i32"), (9, 200, 64, "i64")]
        ],
        lambda k, d, g: [
            torch.randint(0, k["vocab"], (k["tokens"],), generator=g).to(
                dtypes.torch_dtype(k["I"])
            ),
            randn((k["vocab"], k["dim"]), d, g),
        ],
    ),
    "mask_bias": (
        lambda dtype: [{"n": n, "T": dtype} for n in (1, 37, 1000, 4099)],
        lambda k, d, g: [torch.randint(0, 2, (k["n"],), generator=g).to(torch.int8)],
    ),
    "permute": (
        lambda dtype: [
            {"size": size, **_view(d, s), "offset": offset, "T": dtype}
            for size, d, s, offset in PERMUTE_VIEWS
        ],
        lambda k, d, g: [randn((k["size"],), d, g)],
    ),
}


@dataclass
class Case:
    source: str
    launches: list[Launch]
    buffers: dict[str, np.ndarray]
    expected: dict[str, torch.Tensor]
    configs: dict[str, dict]
    dtype: str
    family: str
    #: each output's storage type where it is not the case's (split-K parts are f32)
    output_dtypes: dict[str, str] = field(default_factory=dict)


@cache
def case(family_name: str, dtype: str) -> Case:
    """Pairwise over the shapes and the forks together: each option runs, with each other
    fork's options and on each shape, in far fewer variants than pairwise per shape."""
    keys_of, inputs_of = SPECS[family_name]
    generator = torch.Generator().manual_seed(7)
    keys = keys_of(dtype)
    candidates = [
        {"shape": index, **config}
        for index, key in enumerate(keys)
        for config in configs(family(family_name), key)
    ]
    chosen_configs = pairwise(candidates)
    sources, launches, buffers, expected, chosen = [], [], {}, {}, {}
    output_dtypes: dict[str, str] = {}
    for shape_index, key in enumerate(keys):
        options = [
            {n: v for n, v in c.items() if n != "shape"}
            for c in chosen_configs
            if c["shape"] == shape_index
        ]
        if not options:
            continue
        tensors = inputs_of(key, dtype, generator)
        names = [f"s{shape_index}_in{i}" for i in range(len(tensors))]
        for name, tensor in zip(names, tensors, strict=True):
            integer = tensor.dtype in (torch.int32, torch.int64)
            buffers[name] = tensor.numpy().copy() if integer else to_storage(tensor)
        wants = as_outputs(reference(family_name)(key, tensors))
        stored = [
            param_dtype(p, key)
            for p in active_params(family(family_name), key)
            if p.direction == "out"
        ]
        program = compile_variants(family_name, key, options, prefix=f"s{shape_index}_")
        sources.append(program.source.split("\n", 1)[1])
        for config, (name, info) in zip(options, program.kernels.items(), strict=True):
            outputs = [f"out{i}_{name}" for i in range(len(wants))]
            for output, want, storage in zip(outputs, wants, stored, strict=True):
                buffers[output] = poisoned(TensorSpec(output, tuple(want.shape), storage))
                expected[output] = want
                output_dtypes[output] = storage
                chosen[output] = {"key": key, **config}
            args = tuple(BufferArg(n) for n in [*names, *outputs])
            launches.append(Launch(name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args))
    source = '#include "emmy_device.cuh"\n' + "\n".join(sources)
    return Case(source, launches, buffers, expected, chosen, dtype, family_name, output_dtypes)


def check(c: Case, device: Device, schedule: str = "forward") -> list[str]:
    """Runs every variant of a case on a device; the failures, one line each."""
    buffers = {n: a.copy() for n, a in c.buffers.items()}
    options = {"schedule": schedule} if device.identity == "emu" else {}
    device.run(c.source, c.launches, buffers, timeout=600, **options)
    failures = []
    for output, want in c.expected.items():
        torch_dtype = dtypes.torch_dtype(c.output_dtypes.get(output, c.dtype))
        rtol, atol = tolerance(c.family, c.configs[output]["key"], torch_dtype)
        actual = from_storage(buffers[output], torch_dtype).double().reshape(want.shape)
        want = want.to(torch_dtype).double()
        close = torch.isclose(actual, want, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            where = tuple(int(i) for i in torch.nonzero(~close)[0])
            failures.append(
                f"{c.configs[output]}: first wrong at {list(where)}: {float(actual[where])} vs {float(want[where])}"
            )
    return failures
