"""The reader options of a Delta stream (``spark.readStream.format("delta").option(...)``).

Names as Delta's, case-insensitive; Delta's messages for bad values: ``startingVersion``,
``startingTimestamp``, ``maxFilesPerTrigger``, ``maxBytesPerTrigger``, ``ignoreDeletes``,
``ignoreChanges``, ``skipChangeCommits``, ``excludeRegex`` (``StreamOptions``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serialake.core.log.deltalog import to_millis
from serialake.exceptions import DeltaIllegalArgumentException

__all__ = ["DEFAULT_MAX_FILES", "StreamOptions", "flag", "getter"]

#: Data files per micro-batch when neither limit is given (Delta's default).
DEFAULT_MAX_FILES = 1000


@dataclass(frozen=True)
class StreamOptions:
    """The reader options a Delta stream takes (names as Delta's, case-insensitive)."""

    starting_version: int | None = None
    starting_latest: bool = False
    starting_timestamp: str | None = None
    max_files: int | None = None
    max_bytes: int | None = None
    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False
    exclude_regex: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        """The options of ``options`` (any other key is left alone); Delta's messages for bad values."""
        get = getter(options)
        version, timestamp = get("startingVersion"), get("startingTimestamp")
        if version is not None and timestamp is not None:
            raise DeltaIllegalArgumentException(
                "[DELTA_STARTING_VERSION_AND_TIMESTAMP_BOTH_SET] Please either provide 'startingVersion' or "
                "'startingTimestamp'"
            )
        starting_version: int | None = None
        latest = False
        if version is not None:
            text = version.strip().lower()
            if text == "latest":
                latest = True
            else:
                try:
                    starting_version = int(text)
                except ValueError:
                    starting_version = -1
                if starting_version < 0:
                    raise DeltaIllegalArgumentException(
                        f"[DELTA_ILLEGAL_OPTION] Invalid value '{version}' for option 'startingVersion': must be "
                        "greater than or equal to zero, or 'latest' for the latest version"
                    )
        if timestamp is not None:
            to_millis(timestamp.strip())  # checked now: Delta's message for a string that is no timestamp
        max_files = get("maxFilesPerTrigger")
        files: int | None = None
        if max_files is not None:
            try:
                files = int(max_files)
            except ValueError:
                files = 0
            if files <= 0:
                raise DeltaIllegalArgumentException(
                    f"[DELTA_ILLEGAL_OPTION] Invalid value '{max_files}' for option 'maxFilesPerTrigger': "
                    "must be a positive integer"
                )
        max_bytes = get("maxBytesPerTrigger")
        size = None if max_bytes is None else _byte_size(max_bytes, "maxBytesPerTrigger")
        exclude = get("excludeRegex")
        if exclude is not None:
            try:
                re.compile(exclude)
            except re.error as e:
                raise DeltaIllegalArgumentException(
                    f"[DELTA_REGEX_OPT_SYNTAX_ERROR] Please recheck your syntax for 'excludeRegex': {e}"
                ) from None
        return cls(
            starting_version=starting_version,
            starting_latest=latest,
            starting_timestamp=None if timestamp is None else timestamp.strip(),
            max_files=files,
            max_bytes=size,
            ignore_deletes=flag(get, "ignoreDeletes"),
            ignore_changes=flag(get, "ignoreChanges") or flag(get, "ignoreFileDeletion"),
            skip_change_commits=flag(get, "skipChangeCommits"),
            exclude_regex=exclude,
        )

    @property
    def has_start(self) -> bool:
        return self.starting_version is not None or self.starting_latest or self.starting_timestamp is not None


def getter(options: Mapping[str, Any]) -> Any:
    """A case-insensitive lookup of ``options``: name -> its value as a string, or None."""
    lowered = {str(k).lower(): v for k, v in options.items()}

    def get(name: str) -> str | None:
        value = lowered.get(name.lower())
        return None if value is None else str(value)

    return get


def flag(get: Any, name: str) -> bool:
    """Option ``name`` (``true`` / ``false``, default false) through ``getter``'s ``get``."""
    value = get(name)
    if value is None:
        return False
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise DeltaIllegalArgumentException(
            f"[DELTA_ILLEGAL_OPTION] Invalid value '{value}' for option '{name}': must be 'true' or 'false'"
        )
    return text == "true"


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)(i?b)?\s*$", re.IGNORECASE)


def _byte_size(text: str, name: str) -> int:
    """Spark's byte strings: ``1048576``, ``512k``, ``10m``, ``1g``, ``10mb`` (powers of 1024)."""
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise DeltaIllegalArgumentException(
            f"[DELTA_ILLEGAL_OPTION] Invalid value '{text}' for option '{name}': must be a positive size in "
            "bytes, e.g. 1048576, 512k, 10m or 1g"
        )
    return int(match.group(1)) * 1024 ** "bkmgtp".index((match.group(2) or "b").lower())
