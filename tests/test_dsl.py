"""The kernel language: parsing, errors at file:line:column, keys and constraints."""

import pytest

from emmy.base.errors import EmmyError
from emmy.base.problem_key import ProblemKey, format_key, parse_key
from emmy.dsl import ast
from emmy.dsl.library import declaration, declarations
from emmy.dsl.parser import DslError, parse_source
from emmy.dsl.unparse import unparse
from emmy.sites.fork_space import ForkSpace
from emmy.sites.lower import instantiate

GOOD = """
kernel copy(x: in T[n], y: out T[n]) {
  key n, T;
  fork threads = 64 in [32, 64];
  launch grid = ceil_div(n, threads), block = threads;
  let i = min(block_id() * threads + thread_id(), n - 1);
  y[i] = x[i];
}
"""


def lower_body(body: str, key: str = "n, T") -> None:
    source = GOOD.replace(
        "  let i = min(block_id() * threads + thread_id(), n - 1);\n  y[i] = x[i];\n", body
    )
    source = source.replace("key n, T;", f"key {key};")
    (decl,) = parse_source(source, "k.emmy")
    instantiate(decl, {"n": 8, "T": "f32"}, "k")


def test_library_declares_both_families() -> None:
    assert {"softmax", "elementwise"} <= set(declarations())
    softmax = declaration("softmax")
    assert [f.name for f in softmax.forks] == [
        "threads",
        "rows_per_block",
        "vec",
        "algo",
        "reduction",
    ]
    assert ForkSpace.of(softmax).declared["algo"] == "registers"


def test_constraints_keep_invalid_options_out() -> None:
    softmax = declaration("softmax")
    space = ForkSpace.of(softmax)
    for config in space.configs({"rows": 4, "cols": 7, "T": "f16"}):
        assert config["vec"] == 1
    vecs = {c["vec"] for c in space.configs({"rows": 4, "cols": 1000, "T": "bf16"})}
    assert vecs == {1, 2, 4, 8}


@pytest.mark.parametrize(
    "source, position, message",
    [
        ("kernel k(x: in T[n]) {\n  key n T;\n}", "2:9", "unexpected 'T'"),
        (
            "kernel k(x: in T[n]) {\n  key n;\n  fork a = 3 in [1, 2];\n  launch grid = 1, block = 1;\n}",
            "3:8",
            "default 3 of fork a",
        ),
        (
            "kernel k(x: in T[n]) {\n  key n;\n  fork a = 1 in [1, b];\n  launch grid = 1, block = 1;\n}",
            "3:8",
            "mixes integers and symbols",
        ),
        ("kernel k(x: in T[n]) {\n  key n;\n  launch grid = 1;\n}", "1:1", "has no launch block"),
        (
            "kernel k(x: in T[n]) {\n  key n;\n  launch grid = 1, block = 1, warps = 2;\n}",
            "3:31",
            "unknown launch item 'warps'",
        ),
        ("kernel k(x: in T[n]) {\n  launch grid = 1, block = 1;\n}", "1:1", "declares no key"),
        (
            "kernel k(x: in T[n], y: out T[n] if keep) {\n  key n, T;\n  launch grid = 1, block = 1;\n}",
            "1:1",
            "parameter y depends on 'keep', which is not a key",
        ),
        (
            "kernel k(x: in T[n]) {\n  key n;\n  let a = 1 $ 2;\n}",
            "3:13",
            "unexpected character '$'",
        ),
    ],
)
def test_parse_errors_name_file_line_column(source: str, position: str, message: str) -> None:
    with pytest.raises(DslError) as error:
        parse_source(source, "bad.emmy")
    assert str(error.value).startswith(f"bad.emmy:{position}: ")
    assert message in str(error.value)


@pytest.mark.parametrize(
    "body, message",
    [
        ("  y[0] = nope;\n", "k.emmy:6:10: unknown name 'nope'"),
        ("  y[0] = x[0] + 1;\n", "a float + an integer: convert with float()"),
        ("  y[0, 1] = x[0];\n", "y has 1 dimension(s), indexed with 2"),
        ("  z[0] = x[0];\n", "'z' is not a tensor parameter"),
        ("  let a = 1;\n  a = 2;\n", "a is not a var"),
        ("  y[0] = frobnicate(x[0]);\n", "unknown function frobnicate()"),
        ("  let n = 3;\n", "'n' is a key name and cannot be rebound"),
        ("  let threads = 3;\n", "'threads' is a fork and cannot be rebound"),
        (
            "  y[0] = group_reduce(sum, x[0], 32, threads);\n",
            "reduction strategy must be a symbolic fork",
        ),
        ("  match threads { a => { } }\n", "match needs a symbolic fork"),
        ("  y[0] = exp(1);\n", "exp() takes floats"),
        ("  y[0] = 1;\n", "cannot store an integer to a tensor of f32"),
        ("  y[0] = float(1.0);\n", "float() converts an integer"),
        ("  y[0] = long(x[0]);\n", "long() widens an integer to 64 bits"),
    ],
)
def test_semantic_errors_name_the_line(body: str, message: str) -> None:
    with pytest.raises(DslError) as error:
        lower_body(body)
    assert str(error.value).startswith("k.emmy:")
    assert message in str(error.value)


def test_a_declaration_is_a_typed_syntax_tree() -> None:
    """The parser's nodes are typed, equal by what they say (not where), each with its
    line and column for errors."""
    (decl,) = parse_source(GOOD, "k.emmy")
    (threads,) = decl.forks
    assert threads == ast.ForkDecl("threads", 64, (32, 64), None)
    assert threads.at == (4, 8)
    assert decl.launch["block"] == ast.Name("threads")
    assert decl.params[0] == ast.Param("x", ast.Direction.IN, "T", ("n",), False)
    let, store = decl.body
    thread = ast.Sum(
        ast.Product(ast.Call("block_id"), ((ast.Operator.MUL, ast.Name("threads")),)),
        ((ast.Operator.ADD, ast.Call("thread_id")),),
    )
    last = ast.Sum(ast.Name("n"), ((ast.Operator.SUB, ast.IntLit(1)),))
    assert let == ast.Let((ast.Name("i"),), ast.Call("min", (thread, last)))
    assert (let.at, let.value.at, let.targets[0].at) == ((6, 3), (6, 11), (6, 7))
    index = (ast.Name("i"),)
    assert store == ast.Store(ast.Name("y"), index, ast.Index("x", index))
    assert unparse(let.value) == "min(block_id() * threads + thread_id(), n - 1)"
    assert (
        unparse(let.value, grouped=True) == "min(((block_id() * threads) + thread_id()), (n - 1))"
    )


def test_a_good_kernel_lowers_and_verifies() -> None:
    (decl,) = parse_source(GOOD, "k.emmy")
    site = instantiate(decl, {"n": 8, "T": "bf16"}, "copy_0")
    site.verify()
    assert str(site.key.data) == "n=8,T=bf16"
    assert [k.knob_name.data for k in site.knobs()] == ["threads"]


OPTIONAL = """
kernel scale(x: in T[n], y: out T[n], h: out T[n] if keep) {
  key n, T, factor = 2, keep = no;
  fork threads = 64 in [32, 64];
  launch grid = ceil_div(n, threads), block = threads;
  let i = min(block_id() * threads + thread_id(), n - 1);
  y[i] = x[i] * float(factor);
  match keep {
    yes => { h[i] = x[i]; }
    _ => {}
  }
}
"""


def test_key_defaults_and_parameters_that_depend_on_a_key() -> None:
    """A key left out (or at its default) is not in the canonical text, so measurements of
    a family recorded before a key gained a name still match; a parameter with `if` exists
    only where its key is `yes`."""
    (decl,) = parse_source(OPTIONAL, "k.emmy")
    plain = instantiate(decl, {"n": 8, "T": "f32"}, "a")
    assert str(plain.key.data) == "n=8,T=f32"
    assert instantiate(decl, {"n": 8, "T": "f32", "factor": 2}, "b").key.data == ProblemKey.parse(
        "n=8,T=f32"
    )
    kept = instantiate(decl, {"n": 8, "T": "f32", "factor": 3, "keep": "yes"}, "c")
    assert kept.key.data == ProblemKey.of([("n", 8), ("T", "f32"), ("factor", 3), ("keep", True)])
    assert str(kept.key.data) == "n=8,T=f32,factor=3,keep=yes"
    arity = [
        len(next(o for o in s.walk() if o.name == "kernel.func").body.block.args)
        for s in (plain, kept)
    ]
    assert arity == [2, 3]


PARTS = """
kernel parts(x: in T[n], y: out T[n] if parts == 1, p: out f32[parts, n] if parts > 1) {
  key n, T, parts = 1;
  fork threads = 64 in [32, 64];
  launch grid = parts * ceil_div(n, threads), block = threads;
  let i = min(block_id() % ceil_div(n, threads) * threads + thread_id(), n - 1);
  let s = block_id() / ceil_div(n, threads);
  match parts {
    1 => { y[i] = x[i]; }
    _ => { p[s, i] = x[i] * float(s); }
  }
}
"""


def test_parameters_that_depend_on_a_condition_and_matches_on_an_integer_key() -> None:
    """`if parts > 1` is a condition over the key; `match parts` takes the arm of the key's
    integer value, else `_`."""
    (decl,) = parse_source(PARTS, "k.emmy")
    whole = instantiate(decl, {"n": 8, "T": "bf16"}, "a")
    split = instantiate(decl, {"n": 8, "T": "bf16", "parts": 3}, "b")
    args = [
        next(o for o in s.walk() if o.name == "kernel.func").body.block.args for s in (whole, split)
    ]
    assert [str(a.type) for a in args[0]] == ["!kernel.ptr<bf16>", "!kernel.ptr<bf16>"]
    assert [str(a.type) for a in args[1]] == ["!kernel.ptr<bf16>", "!kernel.ptr<f32>"]
    with pytest.raises(DslError, match="parameter p depends on 'chunks', which is not a key"):
        parse_source(PARTS.replace("if parts > 1", "if chunks > 1"), "k.emmy")


PAIRS = """
kernel pairs(x: in T[n], y: out f32[n, 2]) {
  key n, T;
  fork threads = 64 in [32, 64];
  launch grid = ceil_div(n, threads), block = threads;
  let i = min(block_id() * threads + thread_id(), n - 1);
  y[i, 0] = x[i];
  y[i, 1] = x[i] * x[i];
}
"""


def test_a_dim_may_be_a_size() -> None:
    """`f32[n, 2]`: a pair per element (attention_stats' statistics, whose checks on the
    emulator run the offsets it strides by); its shape at a key reads the key's dims and
    the sizes alike."""
    (decl,) = parse_source(PAIRS, "k.emmy")
    out = decl.params[1]
    assert out.dims == ("n", "2") and out.shape({"n": 5, "T": "f32"}) == (5, 2)
    site = instantiate(decl, {"n": 5, "T": "f32"}, "a")
    site.verify()


def test_keys_round_trip_with_commas_inside_parentheses() -> None:
    key = {"n": 12, "T": "f32", "fn": "max(in0, 0.5)"}
    text = format_key(["n", "T", "fn"], key)
    assert text == "n=12,T=f32,fn=max(in0, 0.5)"
    assert parse_key(text) == key
    with pytest.raises(EmmyError, match="not name=value"):
        parse_key("n=1,oops")


def test_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(EmmyError, match="unknown kernel family 'conv2d'"):
        declaration("conv2d")


def test_shared_arrays_and_reductions_share_the_block_memory(monkeypatch) -> None:
    """Reduction scratch is placed after the shared arrays, so both work in one kernel,
    under every thread order."""
    from pathlib import Path

    import numpy as np

    from emmy.compiler import compile_variants
    from emmy.runtime.device import BufferArg, Launch
    from emmy.runtime.emu import EmuDevice

    monkeypatch.setenv("EMMY_LIBRARY_PATH", str(Path(__file__).parent / "library"))
    key = {"rows": 3, "cols": 100, "T": "f32"}
    configs_ = list(ForkSpace.of(declaration("staged_sum")).configs(key))
    program = compile_variants("staged_sum", key, configs_)
    assert "emmy::smem() + 400" in program.source
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    for schedule in ("forward", "reverse"):
        buffers = {"x": x}
        launches = []
        for name, info in program.kernels.items():
            buffers[f"y_{name}"] = np.full(3, np.nan, dtype=np.float32)
            args = (BufferArg("x"), BufferArg(f"y_{name}"))
            launches.append(Launch(name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args))
        EmuDevice().run(program.source, launches, buffers, schedule=schedule)
        for name in program.kernels:
            np.testing.assert_allclose(buffers[f"y_{name}"], x.sum(axis=1), rtol=1e-5)
