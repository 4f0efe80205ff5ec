"""What a commit's actions must satisfy before any is written (``OptimisticTransaction.commit``).

No file added, removed or set twice, every path inside the table directory (or one a
shallow clone may list), no data removed from an append-only table, and on a table with the
change data feed no rewrite without its change files. Each check raises; none reads the log.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from serialake.core.log import cdf
from serialake.core.model import properties as props
from serialake.core.model.actions import Action, AddCDCFile, AddFile, Metadata, RemoveFile, SetTransaction
from serialake.exceptions import DeltaAnalysisException, DeltaIllegalArgumentException, UnsupportedFeatureError
from serialake.storage.s3 import S3_SCHEMES

__all__ = ["check_append_only", "check_change_data_feed", "check_duplicates", "check_paths"]


def check_duplicates(body: list[Action], table: str) -> None:
    seen_add: set[str] = set()
    seen_remove: set[str] = set()
    apps: dict[str, int] = {}
    for a in body:
        if isinstance(a, AddFile):
            if a.path in seen_add:
                raise DeltaIllegalArgumentException(f"Commit to {table} adds file {a.path} twice")
            seen_add.add(a.path)
        elif isinstance(a, RemoveFile):
            if a.path in seen_remove:
                raise DeltaIllegalArgumentException(f"Commit to {table} removes file {a.path} twice")
            seen_remove.add(a.path)
        elif isinstance(a, SetTransaction):
            if a.app_id in apps and apps[a.app_id] != a.version:
                raise DeltaIllegalArgumentException(
                    f"Commit to {table} sets two versions for application {a.app_id}"
                )
            apps[a.app_id] = a.version


def check_paths(body: list[Action], table: str, external_allowed: Any) -> None:
    """Every file path stays in the table directory, unless ``external_allowed(path)`` says it may
    not (a shallow clone's files, by absolute path)."""
    for a in body:
        if isinstance(a, (AddFile, RemoveFile, AddCDCFile)):
            p = a.path
            if p and "%" not in p and ":" not in p and ".." not in p and p[0] != "/":
                continue  # a plain relative path (the common case): inside the table
            p = unquote(p)
            if p.startswith("file:"):
                p = p[5:].lstrip("/")
                p = "/" + p
            if "://" in p:
                scheme = p.split("://", 1)[0].lower()
                if scheme not in S3_SCHEMES:
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' uses the URI scheme '{scheme}', which serialake does not serve"
                    )
                if not _inside_s3_table(p, table) and not external_allowed(a.path):
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' is outside table {table}"
                    )
                continue
            if p.startswith("/"):
                inside = (p + "/").startswith(table.rstrip("/") + "/") or p.startswith(table.rstrip("/") + "/")
                if not inside and not external_allowed(a.path):
                    raise DeltaIllegalArgumentException(
                        f"Data file path '{a.path}' escapes the table directory of {table}"
                    )
                continue
            norm = posixpath.normpath(p)
            if norm == ".." or norm.startswith("../") or p == "":
                raise DeltaIllegalArgumentException(
                    f"Data file path '{a.path}' escapes the table directory of {table}"
                )


def _inside_s3_table(uri: str, table: str) -> bool:
    """Whether S3 object ``uri`` lies under S3 table ``table`` (``s3`` and ``s3a`` alike)."""
    if "://" not in table or table.split("://", 1)[0].lower() not in S3_SCHEMES:
        return False
    inner = uri.split("://", 1)[1].rstrip("/")
    root = table.split("://", 1)[1].rstrip("/")
    return inner.startswith(root + "/")


def check_change_data_feed(
    body: list[Action], operation: str, parameters: Mapping[str, Any] | None, meta: Metadata | None, table: str
) -> None:
    """Refuse, on a CDF table, a rewrite without its change data files (readers would misread it).

    Appends, whole-file deletes, deletion-vector deletes and overwrites need none (``core.log.cdf``).
    """
    if meta is None or not meta.derived(cdf.enabled):
        return
    reason = cdf.commit_needs_change_data(body, operation, parameters)
    if reason is not None:
        raise UnsupportedFeatureError(
            f"Table {table} has delta.enableChangeDataFeed=true: this commit rewrites data "
            f"({reason}) without change data files (cdc actions), which change-feed readers would "
            "misread. Write the changed rows under _change_data/ in the same commit, or unset the property."
        )


def check_append_only(body: list[Action], meta: Metadata | None, table: str) -> None:
    """Refuse, on an append-only table, a commit that removes data (``dataChange`` removes)."""
    if meta is None or not meta.derived(_append_only):
        return
    for a in body:
        if isinstance(a, RemoveFile) and a.data_change:
            raise DeltaAnalysisException(
                f"Table {table} is append-only (delta.appendOnly=true): this commit removes "
                f"data file {a.path}. Unset the property to delete or update rows."
            )


def _append_only(meta: Metadata) -> bool:
    return bool(props.get(meta.configuration, props.APPEND_ONLY))
