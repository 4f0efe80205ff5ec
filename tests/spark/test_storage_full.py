"""A full disk during a DML's driver-side rewrite: a clear error naming the file and errno, nothing committed.

Runs on a real, tiny tmpfs mounted for the test (root only) and unmounted after it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from serialake.core import DeltaLog
from serialake.exceptions import StorageWriteError
from serialake.spark import DeltaTable, write

pytestmark = pytest.mark.spark


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = Path(tempfile.mkdtemp(prefix="serialake-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        shutil.rmtree(mount_point, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        shutil.rmtree(mount_point, ignore_errors=True)


def _fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def test_driver_rewrite_on_a_full_disk(spark: SparkSession, tiny_disk: Path) -> None:
    path = str(tiny_disk / "t")
    write(spark.createDataFrame([(i, i % 3) for i in range(50)], "id long, g long").coalesce(1), path)
    before = DeltaLog.for_table(path).update()
    data_before = sorted(os.listdir(path))
    _fill(tiny_disk)
    with pytest.raises(StorageWriteError) as info:
        DeltaTable.forPath(spark, path).delete("id < 10")
    e = info.value
    assert e.errno == errno.ENOSPC and e.table == path
    assert "No space left on device" in str(e) and "Nothing was committed" in str(e)
    os.remove(tiny_disk / "filler")
    DeltaLog.clear_cache()
    assert DeltaLog.for_table(path).update().version == before.version
    assert sorted(os.listdir(path)) == data_before  # no stray data or staging files
