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


#: the test files that take longest (seconds of CPU on 2 cores, measured on a fresh clone:
#: 150 for the library's families down to ~20), longest first. The suite runs each file in
#: one worker (--dist loadfile: its module fixtures, a Ray cluster or gpu-day's prepared
#: folder, set up once), and the long files go first so that the two workers end together
#: rather than one finishing a long file alone
LONGEST_FIRST = (
    # its Ray cluster's processes wait as much as they compute: first, beside the others
    "test_campaign_ray.py",
    "test_library_families.py",
    "test_scripts_smoke.py",
    "test_vision_models.py",
    "test_gpu_day.py",
    "test_hf_default_call.py",
    "test_hf_models.py",
    "test_recipe_resources.py",
    "test_opinfo.py",
    "test_training.py",
    "test_dynamic_shapes.py",
    "test_hf_generate.py",
    "test_bench.py",
    "test_gpu_check.py",
    "test_types.py",
    "test_docs.py",
)


#: why a test marked `gpu` is skipped on a machine without one
NO_GPU = "needs a CUDA device and a CUDA build of torch (scripts/gpu-day runs it on a GPU)"


def gpu_present() -> bool:
    """Whether this process can run the tests marked `gpu`: a CUDA device and torch's CUDA."""
    import torch

    from emmy.runtime.cuda import cuda_available

    return cuda_available() and torch.cuda.is_available()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist would reorder a --dist loadfile run's files by their test counts:
    # LONGEST_FIRST orders them by their time
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
    # asked only where a test needs it: cuInit in this process before a test forks would
    # leave the children no CUDA
    needing = [item for item in items if item.get_closest_marker("gpu")]
    if needing and not gpu_present():
        for item in needing:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))
