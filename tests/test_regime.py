import pytest

from emmy.base.errors import EmmyError
from emmy.base.regime import DEPLOYABLE_FLAGS, Regime, normalise_flags


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("-Xnvvm -opt=1", "-Xnvvm=-opt=1"),
        ("-Xnvvm -opt=1", ["-Xnvvm", "-opt=1"]),
        ("-DB=2 -DA", "-D A --define-macro B=2"),
        ("-DA=1 -DA=2", "-DA=2"),
        ("-Xptxas -O1,-dlcm=cg", "--ptxas-options=-dlcm=cg --ptxas-options=-O1"),
        ("-lineinfo -use_fast_math", "--use_fast_math --generate-line-info"),
        ("--maxrregcount 64 -maxrregcount=32", "--maxrregcount=32"),
        ("-ftz=true --fmad=false", "--fmad=false -ftz=true"),
    ],
)
def test_equivalent_spellings_normalise_alike(a, b):
    assert normalise_flags(a) == normalise_flags(b)
    assert Regime(normalise_flags(a), "sm_90").id == Regime(normalise_flags(b), "sm_90").id


def test_canonical_forms():
    assert normalise_flags("-Xnvvm -opt=1") == ("-Xnvvm=-opt=1",)
    assert normalise_flags("-Xptxas -O1,-v") == ("--ptxas-options=-O1",)
    assert normalise_flags("-D B -DA=1") == ("-DA=1", "-DB")


@pytest.mark.parametrize(
    "flags",
    [
        "",
        "--ptxas-options=-v",
        "-Xptxas --verbose",
        "-std=c++17 -default-device -w",
        "-Xnvvm -opt=3",
        "--ptxas-options=-O3",
    ],
)
def test_flags_that_do_not_change_code_are_dropped(flags):
    assert normalise_flags(flags) == DEPLOYABLE_FLAGS
    assert Regime(normalise_flags(flags), "sm_90").is_deployable


def test_o3_is_refused_with_an_explanation():
    with pytest.raises(EmmyError, match=r"already optimises at O3.*-Xnvvm -opt=N"):
        normalise_flags("-O3")
    with pytest.raises(EmmyError, match="-O2"):
        normalise_flags(["-O2"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("-I/usr/include", "not a code-generation flag"),
        ("--gpu-architecture=sm_80", "arch is part of the regime"),
        ("-arch sm_80", "arch is part of the regime"),
        ("-std=c++20", "c\\+\\+17"),
        ("-ftz", "needs a value"),
        ("-ftz=maybe", "true\\|false"),
        ("-Xnvvm -opt=7", "-opt=0..3"),
        ("-lineinfo=1", "takes no value"),
        ("sm_90", "not an option"),
        ("-D 1X", "not a macro name"),
        ("'-DA", "cannot parse"),
    ],
)
def test_bad_flags_are_refused(flags, message):
    with pytest.raises(EmmyError, match=message):
        normalise_flags(flags)


def test_regime_identity_and_words():
    default = Regime.deployable("sm_90")
    lower = Regime(("-Xnvvm", "-opt=1"), "sm_90")  # normalised on construction
    assert default.words == "nvrtc default (-O3)"
    assert default.is_deployable and not lower.is_deployable
    assert lower.flags == ("-Xnvvm=-opt=1",)
    assert lower.words == "-Xnvvm=-opt=1"
    assert default.id != lower.id
    assert default.id != Regime.deployable("sm_80").id
    assert default.id.startswith("r-") and len(default.id) == 14
    assert default.id == Regime((), "sm_90").id  # stable
    assert lower == Regime(("-Xnvvm=-opt=1",), "sm_90")


@pytest.mark.parametrize("arch", ["compute_90", "sm90", "90", ""])
def test_regime_needs_a_real_arch(arch):
    with pytest.raises(EmmyError, match="real GPU arch"):
        Regime((), arch)
