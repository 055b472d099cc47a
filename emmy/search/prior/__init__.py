"""The learned prior, the third oracle: predicts a config's time for a key on a device.

`emmy fit` (a later stage) writes its weights and metadata beside this file; a compile
evaluates them with numpy alone. Until a prior has been fitted and committed, there is
none, and the prior oracle decides nothing (it never guesses in its place).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from emmy.search.oracles import Decision, SiteQuery

PRIOR_DIR = Path(__file__).resolve().parent


class Prior(Protocol):
    def decide(self, query: SiteQuery) -> Decision | None: ...


def load_prior(device: str) -> Prior | None:
    """The committed prior for `device`, or None when none has been fitted."""
    if not (PRIOR_DIR / "weights.npz").exists():
        return None
    from emmy.errors import EmmyError

    raise EmmyError(
        f"{PRIOR_DIR / 'weights.npz'}: this emmy has no evaluator for fitted priors yet"
    )
