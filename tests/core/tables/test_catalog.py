"""The table-name registry: JSON file plus in-process names (no Spark)."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

import serialake
from serialake.core.tables import catalog
from serialake.exceptions import CorruptLogError, DeltaIllegalArgumentException


@pytest.fixture
def tmp_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh catalog file for the test; names registered in-process are forgotten afterwards."""
    path = tmp_path / "catalog" / "catalog.json"
    monkeypatch.setenv(catalog.CATALOG_ENV, str(path))
    yield path
    path.unlink(missing_ok=True)
    for name in catalog.list_tables():
        catalog.unregister(name)


def test_register_lookup_unregister(tmp_catalog: Path, tmp_path: Path) -> None:
    location = serialake.register("Events", str(tmp_path / "events"))
    assert location == str(tmp_path / "events")
    assert catalog.lookup("events") == location
    assert catalog.lookup("EVENTS") == location
    assert catalog.lookup("default.events") == location
    assert catalog.lookup("spark_catalog.default.`events`") == location
    assert json.loads(tmp_catalog.read_text())["tables"]["events"] == {"location": location}
    assert catalog.unregister("events")
    assert catalog.lookup("events") is None
    assert not catalog.unregister("events")


def test_in_process_names_shadow_the_file_and_are_not_written(tmp_catalog: Path, tmp_path: Path) -> None:
    catalog.register("t", str(tmp_path / "file"))
    catalog.register("t", str(tmp_path / "memory"), persist=False)
    assert catalog.lookup("t") == str(tmp_path / "memory")
    assert json.loads(tmp_catalog.read_text())["tables"]["t"]["location"] == str(tmp_path / "file")
    assert catalog.list_tables() == {"t": str(tmp_path / "memory")}


def test_catalog_env_may_name_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(catalog.CATALOG_ENV, str(tmp_path) + "/")
    assert catalog.catalog_file() == tmp_path / "catalog.json"
    assert catalog.warehouse_dir() == tmp_path / "warehouse"


def test_qualified_names_and_bad_names(tmp_path: Path) -> None:
    catalog.register("sales.orders", str(tmp_path / "o"))
    assert catalog.lookup("SALES.orders") == str(tmp_path / "o")
    assert catalog.lookup("orders") is None
    with pytest.raises(DeltaIllegalArgumentException, match="Invalid table name"):
        catalog.register("a..b", str(tmp_path))


def test_corrupt_catalog_file_is_named(tmp_catalog: Path) -> None:
    tmp_catalog.parent.mkdir(parents=True)
    tmp_catalog.write_text("{not json")
    with pytest.raises(CorruptLogError, match=str(tmp_catalog)):
        catalog.lookup("x")


def _register_many(args: tuple[str, int]) -> None:
    env, worker = args
    import os

    os.environ[catalog.CATALOG_ENV] = env
    for i in range(20):
        catalog.register(f"w{worker}_t{i}", f"/data/w{worker}/t{i}")


def test_concurrent_registrations_from_processes_are_all_kept(tmp_catalog: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_register_many, [(str(tmp_catalog), w) for w in range(4)])
    tables = json.loads(tmp_catalog.read_text())["tables"]
    assert len(tables) == 80
