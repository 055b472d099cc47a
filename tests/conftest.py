import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def _emmy_cache(tmp_path_factory):
    """Tests share one kernel cache per run unless EMMY_CACHE_DIR says where to keep it."""
    if "EMMY_CACHE_DIR" not in os.environ:
        os.environ["EMMY_CACHE_DIR"] = str(tmp_path_factory.mktemp("emmy-cache"))
    yield
