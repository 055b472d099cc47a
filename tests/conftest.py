import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def _emmy_cache(tmp_path_factory):
    """Tests share one kernel cache per run unless EMMY_CACHE_DIR says where to keep it."""
    if "EMMY_CACHE_DIR" not in os.environ:
        # pytest-xdist workers share one cache: it is safe for concurrent writers
        base = tmp_path_factory.getbasetemp()
        shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
        os.environ["EMMY_CACHE_DIR"] = str(shared / "emmy-cache")
    yield
