import pytest

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, KNOWN_TARGETS, arch_of, is_well_formed, slug


@pytest.mark.parametrize(
    ("name", "major", "minor", "expected"),
    [
        ("NVIDIA H200", 9, 0, "nvidia-h200-sm90"),
        ("NVIDIA A100-SXM4-80GB", 8, 0, "nvidia-a100-sxm4-80gb-sm80"),
        ("  NVIDIA  GeForce RTX 4090 ", 8, 9, "nvidia-geforce-rtx-4090-sm89"),
        ("NVIDIA B200", 10, 0, "nvidia-b200-sm100"),
        ("", 9, 0, "gpu-sm90"),
    ],
)
def test_slug(name, major, minor, expected):
    assert slug(name, major, minor) == expected
    assert is_well_formed(expected)


def test_arch_of():
    assert arch_of("nvidia-h200-sm90") == "sm_90"
    assert arch_of("nvidia-l4-sm89") == "sm_89"
    assert arch_of("nvidia-b200-sm100") == "sm_100"
    assert arch_of("some-future-card-sm120") == "sm_120"  # any well-formed slug


def test_arch_of_emu_is_an_error():
    with pytest.raises(EmmyError, match="emulator"):
        arch_of(EMU)


@pytest.mark.parametrize("bad", ["NVIDIA H200", "nvidia-h200", "nvidia--h200-sm90", "h200-sm9", ""])
def test_arch_of_malformed(bad):
    assert not is_well_formed(bad)
    with pytest.raises(EmmyError, match="malformed") as info:
        arch_of(bad)
    assert "\n" not in str(info.value)


def test_known_targets():
    assert "nvidia-h200-sm90" in KNOWN_TARGETS
    assert {arch_of(t) for t in KNOWN_TARGETS} == {"sm_80", "sm_89", "sm_90", "sm_100"}
