"""Staging areas of concurrent writers: one leaving (and removing the empty ``_staging``) never
breaks another one arriving. No SparkSession is needed; the module lives beside Spark's I/O."""

from __future__ import annotations

import os
import threading

import pytest

from serialake.exceptions import StorageWriteError
from serialake.spark.staging import STAGING_DIR, staging_area

pytestmark = pytest.mark.spark


def test_concurrent_staging_areas_never_lose_their_directory(tmp_path) -> None:
    table = str(tmp_path / "t")
    os.makedirs(table)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer() -> None:
        try:
            start.wait()
            for i in range(300):
                with staging_area(table) as staging:
                    assert os.path.isdir(staging)
                    with open(os.path.join(staging, f"part-{i}.parquet"), "wb") as f:
                        f.write(b"x")
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert not os.path.exists(os.path.join(table, STAGING_DIR))


def test_staging_area_that_cannot_be_created_names_the_table(tmp_path) -> None:
    table = tmp_path / "t"
    table.write_text("not a directory")
    with pytest.raises(StorageWriteError) as info:
        with staging_area(str(table)):
            pass
    assert str(table) in str(info.value) and "_staging" in str(info.value)
