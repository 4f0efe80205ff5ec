"""The log-store contract every storage backend implements.

Correctness rests on one primitive: ``put_if_absent`` makes a file appear whole or not
at all, and never overwrites one that exists (it raises ``FileAlreadyExistsError``).
Listing is sorted by name; a reader never sees a partially written log file.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class FileStatus:
    """A listed file: its name (not path), size in bytes and modification time in ms."""

    name: str
    size: int
    modification_time: int


class LogStore(ABC):
    """Reads, lists and atomically writes files under a table root (paths are absolute)."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole content of ``path``; ``FileNotFoundError`` if absent."""

    @abstractmethod
    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        """Files in ``directory`` whose name is >= ``start_name``, sorted by name.

        A missing directory lists as empty.
        """

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` atomically and durably, or raise ``FileAlreadyExistsError``."""

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` atomically (for checkpoints and ``_last_checkpoint``)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path``; a missing file is not an error."""

    def is_partial_write_visible(self) -> bool:
        """Whether readers can observe half-written files (never for stores we ship)."""
        return False
