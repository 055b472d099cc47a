import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from emmy.frontend.packages import allow_torchvision  # noqa: E402 - after the path

# transformers and diffusers import torchvision, a CUDA build: see emmy.frontend.packages
allow_torchvision()


@pytest.fixture(scope="session", autouse=True)
def _emmy_cache(tmp_path_factory):
    """Tests share one kernel cache per run unless EMMY_CACHE_DIR says where to keep it."""
    if "EMMY_CACHE_DIR" not in os.environ:
        # pytest-xdist workers share one cache: it is safe for concurrent writers
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
        os.environ["EMMY_CACHE_DIR"] = str(shared / "emmy-cache")
    yield


@pytest.fixture(scope="session", autouse=True)
def _no_committed_prior(tmp_path_factory):
    """Tests decide from the stores they set up: the committed prior (fitted on the emu
    dataset) would answer emu sites before the declared default. Tests of the prior point
    EMMY_PRIOR_DIR at theirs; tests/test_prior.py checks the committed one."""
    if "EMMY_PRIOR_DIR" not in os.environ:
        os.environ["EMMY_PRIOR_DIR"] = str(tmp_path_factory.mktemp("no-prior"))
    yield


@pytest.fixture(scope="session", autouse=True)
def _strict():
    """Tests run strict: under torch.compile a graph emmy fails to compile raises instead of
    running eagerly (the safety net would hide the bug)."""
    os.environ.setdefault("EMMY_STRICT", "1")
    yield
