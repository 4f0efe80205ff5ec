"""Offsets of a Delta stream and how much a micro-batch admits.

Offsets are Delta's ``DeltaSourceOffset`` fields: ``reservoirId`` (the table id),
``reservoirVersion``, ``index`` (the last data file read within that version's files; -1:
none yet) and ``isStartingVersion`` (reading the initial snapshot of that version)
(``Offset``). A scan yields each version's files (``VersionFiles``) or where it must stop
(``Barrier``); ``Admission`` counts the files and bytes a micro-batch may still take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from serialake.exceptions import DeltaError

__all__ = ["BASE_INDEX", "END_INDEX", "SOURCE_VERSION", "Admission", "Barrier", "Offset", "StreamingSourceError",
           "VersionFiles"]  # fmt: skip

#: The ``index`` of an offset before a version's first file.
BASE_INDEX = -1
#: The ``index`` of the marker after a version's last file (never in an offset).
END_INDEX = 2**63 - 1
#: The ``sourceVersion`` of the offsets written.
SOURCE_VERSION = 1


class StreamingSourceError(DeltaError, RuntimeError):
    """A streaming read of a Delta table cannot go on (a data change, a metadata change, a gap in the log)."""


@dataclass(frozen=True)
class Offset:
    """A position in the stream: after file ``index`` of ``version`` (of its snapshot when ``initial``)."""

    version: int
    index: int
    initial: bool

    def to_json(self, table_id: str) -> dict[str, Any]:
        return {
            "sourceVersion": SOURCE_VERSION,
            "reservoirId": table_id,
            "reservoirVersion": self.version,
            "index": self.index,
            "isStartingVersion": self.initial,
        }


@dataclass(frozen=True)
class Barrier:
    """The stream cannot pass ``version``: ``error`` is raised when it is the next thing to read."""

    version: int
    error: StreamingSourceError


@dataclass(frozen=True)
class VersionFiles:
    """The files of one version a scan reads, with their indexes; ``whole``: admitted all or none
    (a commit's changes in a change data feed stream, as Delta admits them)."""

    version: int
    files: list[tuple[int, Any]]  # AddFile, or core.log.cdf.FileRead for the change data feed
    whole: bool


class Admission:
    """How many files and bytes a micro-batch may still take (Delta's admission control)."""

    def __init__(self, files: int, size: int) -> None:
        self.files = files
        self.size = size
        self.taken = False

    def admit(self, add: Any) -> bool:
        """Whether to take ``add``: always while capacity is left before it (so at least one file)."""
        ok = self.files > 0 and self.size > 0
        self.taken = True
        self.files -= 1
        self.size -= add.size or 0
        return ok

    def admit_all(self, files: Sequence[Any]) -> bool:
        """Whether to take all of ``files``: when they fit, or when nothing was taken yet."""
        if not files:
            return True
        size = sum(f.size or 0 for f in files)
        ok = not self.taken or (self.files >= len(files) and self.size >= size)
        self.taken = True
        self.files -= len(files)
        self.size -= size
        return ok
