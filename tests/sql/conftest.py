"""SQL tests: every test gets its own table catalog (``SERIALAKE_CATALOG`` in a tmp dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serialake.core import catalog


@pytest.fixture(autouse=True)
def tmp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh catalog file for the test; names registered in-process are forgotten afterwards."""
    path = tmp_path / "catalog" / "catalog.json"
    monkeypatch.setenv(catalog.CATALOG_ENV, str(path))
    yield path
    path.unlink(missing_ok=True)  # the test's own file; only in-process names remain
    for name in catalog.list_tables():
        catalog.unregister(name)
