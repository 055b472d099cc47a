"""A campaign's output: one content-addressed freeze of every row received, rewritten
whole and atomically as rows arrive.

The folder holds `freeze-<sha256[:12]>.jsonl` (emmy.dataset.dataset_store's format, so `emmy db
import DIR` takes it as it takes any freeze). A write puts the new freeze in place before
it removes the one it supersedes: a driver killed between the two leaves both, and
reading the folder takes the union of every freeze in it. A row is kept once per cell
(device, regime, family, key, config): the first received stays, unless a forced run
replaces it with the one it measured.
"""

from __future__ import annotations

from pathlib import Path

from emmy.base.errors import EmmyError
from emmy.dataset.dataset_store import (
    assemble_freeze,
    frozen_line,
    read_freeze,
    row_cell,
    write_freeze,
)
from emmy.recall.tuning_db import Row

#: a freeze of a campaign's output folder
FREEZE_GLOB = "freeze-*.jsonl"


def is_failure(row: Row) -> bool:
    """Whether a row says its config failed (an unstable timing is still a time)."""
    return row.status not in ("ok", "unstable")


class CampaignOutput:
    """The rows of a campaign's output folder, and the writer of its freeze."""

    def __init__(self, folder: Path, source: str) -> None:
        self.folder = Path(folder)
        self.source = source
        self.rows: dict[tuple, Row] = {}
        self._lines: dict[tuple, str] = {}
        #: cells this run has replaced (a forced run keeps the first row it measures)
        self._replaced: set[tuple] = set()
        self._written: Path | None = None
        self._dirty = False
        if self.folder.exists() and not self.folder.is_dir():
            raise EmmyError(f"{self.folder}: the campaign's output is not a folder")
        for path in sorted(self.folder.glob(FREEZE_GLOB)) if self.folder.is_dir() else []:
            for row in read_freeze(path):
                self._keep(row)
            self._written = path
        self._dirty = False

    def __contains__(self, cell: tuple) -> bool:
        return cell in self.rows

    def add(self, rows: list[Row], replace: bool = False) -> int:
        """Takes the rows of a cell not held yet (or, with `replace`, of a cell this run has
        not replaced yet); the count taken."""
        taken = 0
        for row in rows:
            cell = row_cell(row)
            if cell in self.rows and not (replace and cell not in self._replaced):
                continue
            if replace:
                self._replaced.add(cell)
            self._keep(row)
            taken += 1
        return taken

    def _keep(self, row: Row) -> None:
        cell = row_cell(row)
        # ids are local to the database a row came from; a freeze leaves them out
        self.rows[cell] = row
        self._lines[cell] = frozen_line(row)
        self._dirty = True

    def flush(self) -> Path | None:
        """Writes the freeze if rows came since the last write, then removes the older
        freezes of the folder; its path (None while there are no rows)."""
        if not self._dirty or not self.rows:
            return self._written
        lines = [self._lines[cell] for cell in sorted(self._lines)]
        created = max(row.created for row in self.rows.values())
        data = assemble_freeze(lines, created, self.source)
        written = write_freeze(self.folder, data).path
        for old in self.folder.glob(FREEZE_GLOB):
            if old.name != written.name:
                old.unlink(missing_ok=True)
        self._written, self._dirty = written, False
        return written

    @property
    def path(self) -> Path | None:
        return self._written
