"""64-bit index arithmetic: a site with a tensor of 2^31 elements or more says so in its key
(`index=i64`) and its kernel computes every index in `long long`; the same kernels at small
shapes, lowered in 64 bits, match torch on the emulator; a family that cannot is a
one-line error. Compiles for an absent GPU never allocate the big tensors (meta tracing)."""

import json
from pathlib import Path

import pytest

from emmy.base.errors import EmmyError
from emmy.check import case, check
from emmy.cli import main
from emmy.dsl.keys import canonical_key
from emmy.dsl.library import declaration
from emmy.runtime.emu import EmuDevice
from emmy.sites.lower import instantiate

#: 2 * (2^30 + 8) elements: just over 2^31, in rows that are not a power of two
WIDE = "torch.relu(torch.randn(2, 2**30 + 8) * 2.0)"


def test_a_wide_site_gets_the_key_field_and_long_long_and_compiles_with_nvrtc(
    capsys, tmp_path: Path
) -> None:
    code = main(["compile", "-c", WIDE, "--target", "nvidia-h200-sm90", "-o", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    (kernel,) = json.loads((tmp_path / "report.json").read_text())["kernels"]
    assert kernel["key"].startswith("n=2147483664,") and kernel["key"].endswith(",index=i64")
    assert kernel["resources"]["spill_stores"] == 0
    source = (tmp_path / "kernels.cu").read_text()
    assert f"__launch_bounds__({kernel['block']}, 1) elementwise_0(" in source
    assert "for (long long " in source and "for (int j" not in source
    assert "2147483664LL" in source  # the bound, a 64-bit constant
    assert (tmp_path / "kernels.cubin").read_bytes()[:4] == b"\x7fELF"


def test_the_field_is_absent_below_2_to_the_31() -> None:
    decl = declaration("elementwise")
    key = {"n": 8, "cols": 8, "T": "f32", "inputs": "full", "fn": "relu(in0)"}
    assert "index" not in canonical_key(decl, key)
    assert "index" not in canonical_key(decl, {**key, "index": "i32"})
    assert canonical_key(decl, {**key, "index": "i64"}).endswith(",index=i64")
    with pytest.raises(EmmyError, match="index=i16 is not i32 or i64"):
        instantiate(decl, {**key, "index": "i16"}, "e")


@pytest.mark.parametrize(
    "family_name", ["elementwise", "softmax", "matmul", "reduce_rows", "permute", "gather"]
)
def test_kernels_lowered_in_64_bits_match_torch_on_emu(family_name: str) -> None:
    wide = case(family_name, "f32", index="i64")
    assert "for (long long " in wide.source
    assert check(wide, EmuDevice()) == []


def test_a_family_that_cannot_index_64_bit_is_a_one_line_error(capsys, tmp_path: Path) -> None:
    # an f16 product takes the tensor-core family, whose cp_async takes 32-bit offsets
    product = "torch.randn(65536, 32768, dtype=torch.float16) @ torch.randn(32768, 64, dtype=torch.float16)"
    code = main(["compile", "-c", product, "--target", "nvidia-h200-sm90", "-o", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code != 0
    (line,) = err.strip().splitlines()
    assert "site matmul_tc_0" in line and "family matmul_tc cannot index 64-bit" in line
    assert "input 0 (tensor<65536x32768xf16>) has 2147483648 elements" in line
