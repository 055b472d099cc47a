"""emmy.base.dtypes is the one table of storage types: its columns agree with numpy, torch, xDSL
and the device header, and no other module keeps a dtype mapping of its own."""

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from xdsl.dialects.builtin import Float64Type, IntegerType, Signedness, i1

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.base.paths import INCLUDE_DIR
from emmy.runtime.convert import from_storage, to_storage

ROOT = Path(__file__).parent.parent
ROWS = list(dtypes.DTYPES.values())
XDSL_TYPES = ("Float32Type", "Float16Type", "BFloat16Type", "IntegerType")


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_bytes_agree_with_numpy_and_torch(row: dtypes.DType) -> None:
    assert row.bytes == np.dtype(row.numpy).itemsize
    assert row.bytes == dtypes.torch_dtype(row.name).itemsize


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_name_round_trips_through_xdsl_and_torch(row: dtypes.DType) -> None:
    typ = dtypes.xdsl_type(row.name)
    assert dtypes.dtype_name(typ) == row.name
    # the IR spells a storage type by its name; a complex one as MLIR does, complex<f32>
    assert str(typ) == (
        f"complex<{'f32' if row.bytes == 8 else 'f64'}>" if row.complex else row.name
    )
    assert dtypes.is_storage_type(typ)
    assert (
        dtypes.is_float_type(typ) == row.floating == dtypes.torch_dtype(row.name).is_floating_point
    )
    assert dtypes.torch_dtype_name(dtypes.torch_dtype(row.name)) == row.name


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_numpy_storage_holds_torch_values(row: dtypes.DType) -> None:
    values = torch.arange(-3, 4).to(dtypes.torch_dtype(row.name))
    stored = to_storage(values)
    assert stored.dtype == np.dtype(row.numpy)
    assert torch.equal(from_storage(stored, values.dtype), values)


def test_bf16_is_stored_as_its_bit_pattern() -> None:
    stored = to_storage(torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    assert stored.tolist() == [0x3F80, 0xC000]


def test_predicates() -> None:
    assert dtypes.FLOAT_NAMES == ("f32", "f16", "bf16")
    assert dtypes.HALF_NAMES == ("f16", "bf16")
    assert dtypes.is_float("bf16") and not dtypes.is_float("i8") and not dtypes.is_float(4)
    assert dtypes.is_half("f16") and not dtypes.is_half("f32") and not dtypes.is_half(None)
    assert not dtypes.is_storage_type(i1) and not dtypes.is_float_type(Float64Type())
    assert not dtypes.is_storage_type(IntegerType(8, Signedness.SIGNED))


def test_unknown_types_are_one_line_errors() -> None:
    with pytest.raises(EmmyError, match=r"'f64' is not a storage type \(one of f32, f16"):
        dtypes.lookup("f64")
    with pytest.raises(EmmyError, match="f64 is not a storage type"):
        dtypes.dtype_name(Float64Type())
    assert dtypes.torch_dtype_name(torch.bool) is None  # a mask's storage is the caller's


def test_c_types_are_the_device_headers() -> None:
    header = (INCLUDE_DIR / "emmy_device.cuh").read_text()
    for row in ROWS:
        if row.c_type.startswith("emmy::"):
            # the header's half types keep their bits as 16-bit unsigned, as numpy does
            assert (
                f"struct {row.c_type.removeprefix('emmy::')} {{\n  unsigned short bits;" in header
            )
            assert row.half


def _kind(node: ast.expr) -> str | None:
    """Which column of the table a literal is written in, if any."""
    numpy_names = {np.dtype(row.numpy).name for row in ROWS} | {"int16"}
    torch_names = {str(dtypes.torch_dtype(row.name)).removeprefix("torch.") for row in ROWS}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if node.value in dtypes.DTYPES:
            return "name"
        if node.value in {row.c_type for row in ROWS}:
            return "c type"
        if node.value in {np.dtype(row.numpy).str for row in ROWS} | {"<i2"}:
            return "typestr"
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return "bytes" if node.value in {row.bytes for row in ROWS} else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in ("np", "numpy") and node.attr in numpy_names:
            return "numpy"
        if node.value.id == "torch" and node.attr in torch_names:
            return "torch"
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name) and node.id in XDSL_TYPES:
        return "xdsl"
    return None


def _dtype_mappings(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            kinds = {_kind(key) if key is not None else None, _kind(value)}
            if None in kinds or len(kinds) < 2 or ("bytes" in kinds and "name" not in kinds):
                continue
            found.append(f"{path}:{node.lineno}: {' -> '.join(sorted(kinds))}")
            break
    return found


def _sources() -> list[Path]:
    python = [*ROOT.glob("emmy/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    scripts = [
        p
        for p in ROOT.glob("scripts/*")
        if p.is_file() and p.read_text().startswith("#!/usr/bin/env python")
    ]
    scripts += ROOT.glob("scripts/gpucheck/*.py")  # gpu-check's parts
    return [p for p in python + scripts if p != ROOT / "emmy" / "base" / "dtypes.py"]


def test_the_scan_finds_a_mapping(tmp_path: Path) -> None:
    source = tmp_path / "tables.py"
    source.write_text(
        'SIZES = {"bf16": 2}\n'
        'VIEW = {"f16": np.float16, "bf16": np.int16}\n'
        'C = {Float32Type: "float"}\n'
        'KEY = {"T": "bf16", "n": 4}\n'
        'LIMITS = {"f32": 1e4, torch.float16: (1e-3, 1e-4)}\n'
    )
    assert [line.split(": ", 1)[1] for line in _dtype_mappings(source)] == [
        "bytes -> name",
        "name -> numpy",
        "c type -> xdsl",
    ]


def test_no_other_module_maps_dtypes() -> None:
    found = [line for path in _sources() for line in _dtype_mappings(path)]
    assert not found, "dtype mappings outside emmy/base/dtypes.py:\n" + "\n".join(found)
