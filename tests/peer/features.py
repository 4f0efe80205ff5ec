"""Table-feature scenarios that either engine writes, and one reading of a table done the same way in both.

``tests/peer/test_features_serialake_writes.py`` runs each scenario's SQL in serialake's session,
``test_features_delta_spark_writes.py`` runs the same SQL in delta-spark's. Either way both
engines must read the same rows (latest and older versions), history, DESCRIBE DETAIL and change
data feed, and those must be what is written down here: the values delta-spark 4.4 gives for the
same statements. So a serialake table and a delta-spark table built by the same statements agree
with each other through these expectations, and each is checked without running the other.
Then the other engine writes to the table (``then``: appends and DML) and both read its rows.

What the two engines legitimately write differently is left out of the expectations:
predicates (delta-spark records Catalyst's text with expression ids, ``(id#123L = 2)``,
serialake the condition as given), operation metrics and file layout (``numFiles`` is compared
between the two readings of one table, not against a number), timestamps (compared only where
in-commit timestamps make them part of the table), ``isolationLevel``/``isBlindAppend``,
``engineInfo``, WRITE's ``partitionBy`` (delta-spark records the writer's ``partitionBy``, none
for an INSERT; serialake the table's partition columns), and parameters only one engine
records (delta-spark's ``description: null`` in CREATE TABLE and RESTORE's ``timestamp: null``,
serialake's ``isShallow`` in CLONE), CLONE's ``source`` (delta-spark writes ``delta.`file:/...```).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from peer.plain import plain, plain_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from peer.client import DeltaSparkPeer

Rows = list[list[Any]]

DETAIL_FIELDS = (
    "format", "partitionColumns", "clusteringColumns", "numFiles", "properties",
    "minReaderVersion", "minWriterVersion", "tableFeatures",
)  # fmt: skip

# Run alike in both engines (delta-spark's worker and serialake's session): a table's rows at each
# version asked for, its history, DESCRIBE DETAIL and, when asked, its change data feed.
READ_CODE = """
def _at(version):
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return rows(reader.load(args["path"]))
_history = DeltaTable.forPath(spark, args["path"]).history().collect()
_detail = spark.sql("DESCRIBE DETAIL delta.`%s`" % args["path"]).collect()[0].asDict(recursive=True)
result = {
    "rows": [_at(v) for v in args["versions"]],
    "history": [
        [h.version, h.operation, dict(h.operationParameters or {}), str(h.timestamp)] for h in reversed(_history)
    ],
    "detail": {k: _detail[k] for k in args["fields"]},
    "feed": None,
}
if args["feed"]:
    _changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
    result["feed"] = rows(_changes.load(args["path"]).drop("_commit_timestamp"))
"""

RUN_CODE = "for _statement in args['statements']:\n    spark.sql(_statement)"


def read_here(spark: SparkSession, path: str, versions: list[int | None], feed: bool = False) -> dict[str, Any]:
    """``READ_CODE`` in serialake's session (the test run's)."""
    from serialake import DeltaTable

    args = {"path": path, "versions": versions, "fields": list(DETAIL_FIELDS), "feed": feed}
    scope: dict[str, Any] = {
        "spark": spark, "DeltaTable": DeltaTable, "args": args, "rows": lambda df: plain_rows(df.collect()),
    }  # fmt: skip
    exec(compile(READ_CODE, "<read here>", "exec"), scope)
    return plain(scope["result"])  # type: ignore[no-any-return]


def rows_here(spark: SparkSession, path: str) -> list[list[object]]:
    """The table's current rows as serialake's session reads them, in value order."""
    return plain_rows(spark.read.format("delta").load(path).collect())


def read_there(peer: DeltaSparkPeer, path: str, versions: list[int | None], feed: bool = False) -> dict[str, Any]:
    """``READ_CODE`` in delta-spark's worker."""
    return peer.run(READ_CODE, path=path, versions=versions, fields=list(DETAIL_FIELDS), feed=feed)  # type: ignore[no-any-return]


def run_here(spark: SparkSession, statements: tuple[str, ...], path: str) -> None:
    for statement in statements:
        spark.sql(statement.format(t=f"delta.`{path}`"))


def run_there(peer: DeltaSparkPeer, statements: tuple[str, ...], path: str) -> None:
    peer.run(RUN_CODE, statements=[s.format(t=f"delta.`{path}`") for s in statements])


def in_commit_timestamps(path: str) -> dict[int, int]:
    """Each commit's ``commitInfo.inCommitTimestamp`` (commits without one left out), from the log."""
    log = os.path.join(path, "_delta_log")
    out = {}
    for name in sorted(os.listdir(log)):
        if name.endswith(".json") and name[:20].isdigit():
            with open(os.path.join(log, name)) as f:
                for line in f:
                    info = json.loads(line).get("commitInfo")
                    if info is not None and info.get("inCommitTimestamp") is not None:
                        out[int(name[:20])] = int(info["inCommitTimestamp"])
    return out


def same_reading(ours: dict[str, Any], theirs: dict[str, Any], ict_from: int | None = None) -> None:
    """serialake's and delta-spark's readings of one table agree: rows, history (timestamps only
    of commits with in-commit timestamps: the others' are the commit files' times, which a
    process that wrote the commit may know to the millisecond otherwise), detail, feed."""

    def strip(reading: dict[str, Any]) -> dict[str, Any]:
        history = [h if ict_from is not None and h[0] >= ict_from else h[:3] for h in reading["history"]]
        return {**reading, "history": history}

    assert strip(ours) == strip(theirs)


def checkpoint_due(latest: int) -> int:
    """The version of the newest checkpoint the scenarios' interval (2) asks for, ``latest`` being
    the newest version: delta-spark writes it then (serialake may write a later one)."""
    return latest - latest % 2


def checkpoint_shape(path: str) -> tuple[int, str]:
    """The newest checkpoint's version and shape (``_last_checkpoint``, and the files it names):
    ``classic`` (one ``<v>.checkpoint.parquet``), ``multi-part`` or ``v2`` (UUID-named, with sidecars)."""
    log = os.path.join(path, "_delta_log")
    with open(os.path.join(log, "_last_checkpoint")) as f:
        last = json.load(f)
    version = int(last["version"])
    prefix = f"{version:020d}.checkpoint."
    names = sorted(n for n in os.listdir(log) if n.startswith(prefix))
    if names == [prefix + "parquet"] and "parts" not in last and "v2Checkpoint" not in last:
        return version, "classic"
    if last.get("parts") and len(names) == last["parts"] and all(n.endswith(".parquet") for n in names):
        return version, "multi-part"
    v2 = last.get("v2Checkpoint") or {}
    if v2.get("path") in names and os.listdir(os.path.join(log, "_sidecars")):
        return version, "v2"
    return version, f"unexpected: {names} {last}"


def operations(reading: dict[str, Any]) -> list[str]:
    """The operations of a reading's history, oldest first."""
    return [h[1] for h in reading["history"]]


def strip_log(path: str, copy: str) -> int:
    """Copy the table at ``path`` to ``copy`` and delete its commits before the newest checkpoint (as
    log cleanup does): a reader of the copy must start from that checkpoint. Returns its version."""
    shutil.copytree(path, copy)
    log = os.path.join(copy, "_delta_log")
    with open(os.path.join(log, "_last_checkpoint")) as f:
        version = int(json.load(f)["version"])
    for name in os.listdir(log):
        if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) < version:
            os.remove(os.path.join(log, name))
    return version


@dataclass(frozen=True)
class Scenario:
    """Statements on ``{t}`` and what any engine's table must show after them.

    ``old``: rows at older versions (time travel). ``parameters``: per version, operation
    parameters both engines record alike (a subset of each commit's). ``detail``: DESCRIBE
    DETAIL's fields but ``format`` and ``numFiles``. ``feed``: the change data feed from version
    0, without ``_commit_timestamp``. ``then``: what the other engine then writes, ``then_rows``
    the rows after it, ``then_operations`` its commits.
    """

    name: str
    statements: tuple[str, ...]
    rows: Rows
    old: dict[int, Rows]
    operations: tuple[str, ...]
    parameters: dict[int, dict[str, str]]
    detail: dict[str, Any]
    then: tuple[str, ...]
    then_rows: Rows
    then_operations: tuple[str, ...]
    feed: Rows | None = None
    then_refused: tuple[str, str] | None = None  # a write the other engine must refuse, and its error's text
    ict_from: int | None = None  # the version from which commits carry in-commit timestamps
    checkpoint: str | None = None  # "classic" / "v2" / "multi-part": the newest checkpoint's shape
    id: str = field(default="", compare=False)

    @property
    def versions(self) -> list[int | None]:
        return [None, *sorted(self.old)]


def _one_file(values: str, columns: str) -> str:
    """Rows of an INSERT in one data file per partition (so DML on some of them writes deletion vectors)."""
    return f"SELECT /*+ REPARTITION(1) */ * FROM VALUES {values} AS v({columns})"


_CM_FEATURES = ["appendOnly", "columnMapping", "invariants"]


def _column_mapping(mode: str) -> Scenario:
    return Scenario(
        name=f"column mapping {mode} (rename, drop)",
        statements=(
            "CREATE TABLE {t} (id BIGINT, a STRING, b INT) USING delta "
            f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')",
            "INSERT INTO {t} VALUES (1, 'x', 10), (2, 'y', 20)",
            "ALTER TABLE {t} RENAME COLUMN a TO a2",
            "ALTER TABLE {t} DROP COLUMN b",
        ),
        rows=[[1, "x"], [2, "y"]],
        old={1: [[1, "x", 10], [2, "y", 20]]},  # before the rename and the drop
        operations=("CREATE TABLE", "WRITE", "RENAME COLUMN", "DROP COLUMNS"),
        parameters={
            0: {
                "partitionBy": "[]",
                "clusterBy": "[]",
                "isManaged": "false",
                "properties": f'{{"delta.columnMapping.mode":"{mode}","delta.columnMapping.maxColumnId":"3"}}',
            },
            1: {"mode": "Append"},
            2: {"oldColumnPath": "a", "newColumnPath": "a2"},
            3: {"columns": '["b"]'},
        },  # fmt: skip
        # Reader version 2 implies column mapping: no reader feature list (delta-spark's choice).
        detail={
            "partitionColumns": [],
            "clusteringColumns": [],
            "properties": {"delta.columnMapping.mode": mode, "delta.columnMapping.maxColumnId": "3"},
            "minReaderVersion": 2,
            "minWriterVersion": 7,
            "tableFeatures": _CM_FEATURES,
        },  # fmt: skip
        then=(
            "INSERT INTO {t} VALUES (3, 'z')",
            "UPDATE {t} SET a2 = 'q' WHERE id = 1",
            "DELETE FROM {t} WHERE id = 2",
        ),
        then_rows=[[1, "q"], [3, "z"]],
        then_operations=("WRITE", "UPDATE", "DELETE"),
        id=f"column-mapping-{mode}",
    )


_MERGE = (
    "MERGE INTO {t} t USING (SELECT 4 AS id, 'm' AS v, 1 AS p UNION ALL SELECT 6, 'n', 1) s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)
_MERGE_PARAMETERS = {
    "matchedPredicates": '[{"actionType":"update"}]',
    "notMatchedPredicates": '[{"actionType":"insert"}]',
    "notMatchedBySourcePredicates": "[]",
}

DELETION_VECTORS = Scenario(
    name="deletion vectors, change data feed, checkpoints: DELETE, UPDATE, REORG PURGE, MERGE, OPTIMIZE",
    statements=(
        "CREATE TABLE {t} (id BIGINT, v STRING, p INT) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true', "
        "'delta.checkpointInterval' = '2')",
        "INSERT INTO {t} " + _one_file("(1, 'a', 0), (2, 'b', 0), (3, 'c', 1), (4, 'd', 1), (5, 'e', 0)", "id, v, p"),
        "DELETE FROM {t} WHERE id = 2",
        "UPDATE {t} SET v = 'z' WHERE id = 3",
        "REORG TABLE {t} APPLY (PURGE)",
        _MERGE,
        "OPTIMIZE {t}",
    ),
    rows=[[1, "a", 0], [3, "z", 1], [4, "m", 1], [5, "e", 0], [6, "n", 1]],
    old={3: [[1, "a", 0], [3, "z", 1], [4, "d", 1], [5, "e", 0]]},  # deletion vectors on both files
    operations=("CREATE TABLE", "WRITE", "DELETE", "UPDATE", "REORG", "MERGE", "OPTIMIZE"),
    parameters={
        0: {
            "partitionBy": '["p"]',
            "clusterBy": "[]",
            "isManaged": "false",
            "properties": '{"delta.enableDeletionVectors":"true","delta.enableChangeDataFeed":"true",'
            '"delta.checkpointInterval":"2"}',
        },
        1: {"mode": "Append"},
        4: {"predicate": "[]", "applyPurge": "true"},
        5: _MERGE_PARAMETERS,
        6: {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": "false"},
    },  # fmt: skip
    detail={
        "partitionColumns": ["p"],
        "clusteringColumns": [],
        "properties": {
            "delta.enableDeletionVectors": "true",
            "delta.enableChangeDataFeed": "true",
            "delta.checkpointInterval": "2",
        },
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "tableFeatures": ["appendOnly", "changeDataFeed", "deletionVectors", "invariants"],
    },  # fmt: skip
    feed=[
        [1, "a", 0, "insert", 1],
        [2, "b", 0, "delete", 2],
        [2, "b", 0, "insert", 1],
        [3, "c", 1, "insert", 1],
        [3, "c", 1, "update_preimage", 3],
        [3, "z", 1, "update_postimage", 3],
        [4, "d", 1, "insert", 1],
        [4, "d", 1, "update_preimage", 5],
        [4, "m", 1, "update_postimage", 5],
        [5, "e", 0, "insert", 1],
        [6, "n", 1, "insert", 5],
    ],  # fmt: skip
    then=(
        "INSERT INTO {t} VALUES (7, 'f', 0)",
        "DELETE FROM {t} WHERE id = 1",
        "UPDATE {t} SET v = 'y' WHERE id = 6",
    ),
    then_rows=[[3, "z", 1], [4, "m", 1], [5, "e", 0], [6, "y", 1], [7, "f", 0]],
    then_operations=("WRITE", "DELETE", "UPDATE"),
    checkpoint="classic",
    id="deletion-vectors",
)

CHANGE_DATA_FEED = Scenario(
    name="change data feed (change files): DELETE, UPDATE, MERGE, a partition's DELETE",
    statements=(
        "CREATE TABLE {t} (id BIGINT, v STRING, p INT) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
        "INSERT INTO {t} " + _one_file("(1, 'a', 0), (2, 'b', 0), (3, 'c', 1), (4, 'd', 1)", "id, v, p"),
        "DELETE FROM {t} WHERE id = 2",
        "UPDATE {t} SET v = 'z' WHERE id = 3",
        _MERGE,
        "DELETE FROM {t} WHERE p = 0",
    ),
    rows=[[3, "z", 1], [4, "m", 1], [6, "n", 1]],
    old={2: [[1, "a", 0], [3, "c", 1], [4, "d", 1]]},
    operations=("CREATE TABLE", "WRITE", "DELETE", "UPDATE", "MERGE", "DELETE"),
    parameters={
        0: {
            "partitionBy": '["p"]',
            "clusterBy": "[]",
            "isManaged": "false",
            "properties": '{"delta.enableChangeDataFeed":"true"}',
        },
        4: _MERGE_PARAMETERS,
    },  # fmt: skip
    detail={
        "partitionColumns": ["p"],
        "clusteringColumns": [],
        "properties": {"delta.enableChangeDataFeed": "true"},
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "tableFeatures": ["appendOnly", "changeDataFeed", "invariants"],
    },  # fmt: skip
    feed=[
        [1, "a", 0, "delete", 5],
        [1, "a", 0, "insert", 1],
        [2, "b", 0, "delete", 2],
        [2, "b", 0, "insert", 1],
        [3, "c", 1, "insert", 1],
        [3, "c", 1, "update_preimage", 3],
        [3, "z", 1, "update_postimage", 3],
        [4, "d", 1, "insert", 1],
        [4, "d", 1, "update_preimage", 4],
        [4, "m", 1, "update_postimage", 4],
        [6, "n", 1, "insert", 4],
    ],  # fmt: skip
    then=("INSERT INTO {t} VALUES (7, 'f', 0)", "UPDATE {t} SET v = 'y' WHERE id = 6"),
    then_rows=[[3, "z", 1], [4, "m", 1], [6, "y", 1], [7, "f", 0]],
    then_operations=("WRITE", "UPDATE"),
    id="change-data-feed",
)

GENERATED = Scenario(
    name="identity column, generated column, CHECK constraints",
    statements=(
        "CREATE TABLE {t} (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5), v INT, "
        "g INT GENERATED ALWAYS AS (v * 2)) USING delta",
        "INSERT INTO {t} (v) VALUES (1), (2)",
        "ALTER TABLE {t} ADD CONSTRAINT pos CHECK (v > 0)",
        "ALTER TABLE {t} ADD CONSTRAINT small CHECK (v < 100)",
        "ALTER TABLE {t} DROP CONSTRAINT small",
        "UPDATE {t} SET v = 7 WHERE v = 1",
    ),
    rows=[[10, 7, 14], [15, 2, 4]],
    old={1: [[10, 1, 2], [15, 2, 4]]},
    operations=("CREATE TABLE", "WRITE", "ADD CONSTRAINT", "ADD CONSTRAINT", "DROP CONSTRAINT", "UPDATE"),
    parameters={
        0: {"partitionBy": "[]", "clusterBy": "[]", "isManaged": "false", "properties": "{}"},
        2: {"name": "pos", "expr": "v > 0"},
        4: {"name": "small", "expr": "v < 100", "existed": "true"},
    },  # fmt: skip
    detail={
        "partitionColumns": [],
        "clusteringColumns": [],
        "properties": {"delta.constraints.pos": "v > 0"},
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "tableFeatures": ["appendOnly", "checkConstraints", "generatedColumns", "identityColumns", "invariants"],
    },  # fmt: skip
    # The other engine generates identity values above the high-water mark the first one left (15).
    then=("INSERT INTO {t} (v) VALUES (3)", "UPDATE {t} SET v = 4 WHERE v = 2"),
    then_rows=[[10, 7, 14], [15, 4, 8], [20, 3, 6]],
    then_operations=("WRITE", "UPDATE"),
    then_refused=("INSERT INTO {t} (v) VALUES (0)", "CHECK constraint pos (v > 0)"),
    id="generated-identity-constraints",
)

CLUSTERING = Scenario(
    name="liquid clustering (domain metadata): CLUSTER BY, OPTIMIZE, ALTER TABLE CLUSTER BY",
    # Deletion vectors set explicitly: serialake turns them on for a table created clustered
    # (clustering.cluster_table), delta-spark does not; so both engines build the same table.
    statements=(
        "CREATE TABLE {t} (id BIGINT, k STRING, n INT) USING delta CLUSTER BY (k) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        "INSERT INTO {t} VALUES (1, 'b', 1), (2, 'a', 2)",
        "INSERT INTO {t} VALUES (3, 'c', 3)",
        "OPTIMIZE {t}",
        "ALTER TABLE {t} CLUSTER BY (n, id)",
    ),
    rows=[[1, "b", 1], [2, "a", 2], [3, "c", 3]],
    old={1: [[1, "b", 1], [2, "a", 2]]},
    operations=("CREATE TABLE", "WRITE", "WRITE", "OPTIMIZE", "CLUSTER BY"),
    parameters={
        0: {
            "partitionBy": "[]",
            "clusterBy": '["k"]',
            "isManaged": "false",
            "properties": '{"delta.enableDeletionVectors":"true"}',
        },
        3: {"predicate": "[]", "zOrderBy": "[]", "clusterBy": '["k"]', "isFull": "false", "auto": "false"},
        4: {"oldClusteringColumns": "k", "newClusteringColumns": "n,id"},
    },  # fmt: skip
    detail={
        "partitionColumns": [],
        "clusteringColumns": ["n", "id"],
        "properties": {"delta.enableDeletionVectors": "true"},
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "tableFeatures": ["appendOnly", "clustering", "deletionVectors", "domainMetadata", "invariants"],
    },  # fmt: skip
    then=("INSERT INTO {t} VALUES (4, 'd', 0)", "DELETE FROM {t} WHERE id = 1", "OPTIMIZE {t}"),
    then_rows=[[2, "a", 2], [3, "c", 3], [4, "d", 0]],
    then_operations=("WRITE", "DELETE", "OPTIMIZE"),
    id="clustering",
)

_NO_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"

TIMESTAMPS_RESTORE_VACUUM = Scenario(
    name="in-commit timestamps turned on later, RESTORE, VACUUM",
    statements=(
        "CREATE TABLE {t} (id BIGINT, v STRING) USING delta",
        "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')",
        "INSERT INTO {t} VALUES (3, 'c')",
        "DELETE FROM {t} WHERE id = 1",
        # To a version with in-commit timestamps on (a RESTORE to one before turns them off again,
        # the metadata being restored, in both engines).
        "RESTORE TABLE {t} TO VERSION AS OF 3",
        f"SET {_NO_RETENTION_CHECK} = false",
        "VACUUM {t} RETAIN 0 HOURS",
        f"RESET {_NO_RETENTION_CHECK}",
    ),
    rows=[[1, "a"], [2, "b"], [3, "c"]],
    old={1: [[1, "a"], [2, "b"]]},  # (files only older versions need are gone: VACUUM)
    operations=(
        "CREATE TABLE",
        "WRITE",
        "SET TBLPROPERTIES",
        "WRITE",
        "DELETE",
        "RESTORE",
        "VACUUM START",
        "VACUUM END",
    ),  # fmt: skip
    parameters={
        2: {"properties": '{"delta.enableInCommitTimestamps":"true"}'},
        5: {"version": "3"},
        6: {"retentionCheckEnabled": "false", "defaultRetentionMillis": "604800000", "specifiedRetentionMillis": "0"},
        7: {"status": "COMPLETED"},
    },  # fmt: skip
    # delta.inCommitTimestampEnablementTimestamp: checked to be version 2's in-commit timestamp.
    detail={
        "partitionColumns": [],
        "clusteringColumns": [],
        "properties": {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "2"},
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "tableFeatures": ["appendOnly", "inCommitTimestamp", "invariants"],
    },  # fmt: skip
    then=("INSERT INTO {t} VALUES (4, 'd')", "DELETE FROM {t} WHERE id = 2"),
    then_rows=[[1, "a"], [3, "c"], [4, "d"]],
    then_operations=("WRITE", "DELETE"),
    ict_from=2,
    id="ict-restore-vacuum",
)


def _checkpoints(policy: str) -> Scenario:
    properties = {"delta.checkpointInterval": "2", "delta.enableDeletionVectors": "true"}
    readers = ["deletionVectors"]
    if policy == "v2":
        properties["delta.checkpointPolicy"] = "v2"
        readers.append("v2Checkpoint")
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    return Scenario(
        name=f"checkpoints, delta.checkpointPolicy {policy}",
        statements=(
            f"CREATE TABLE {{t}} (id BIGINT, v STRING) USING delta TBLPROPERTIES ({listed})",
            "INSERT INTO {t} " + _one_file("(1, 'a'), (2, 'b'), (3, 'c')", "id, v"),
            "DELETE FROM {t} WHERE id = 2",  # version 2: a checkpoint, with a deletion vector
            "INSERT INTO {t} VALUES (4, 'd')",
        ),
        rows=[[1, "a"], [3, "c"], [4, "d"]],
        old={1: [[1, "a"], [2, "b"], [3, "c"]]},
        operations=("CREATE TABLE", "WRITE", "DELETE", "WRITE"),
        parameters={},
        detail={
            "partitionColumns": [],
            "clusteringColumns": [],
            "properties": properties,
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "tableFeatures": sorted(["appendOnly", "invariants", *readers]),
        },  # fmt: skip
        then=("INSERT INTO {t} VALUES (5, 'e')", "DELETE FROM {t} WHERE id = 1"),  # version 4: a checkpoint
        then_rows=[[3, "c"], [4, "d"], [5, "e"]],
        then_operations=("WRITE", "DELETE"),
        checkpoint=policy,
        id=f"checkpoints-{policy}",
    )


def one_direction(scenarios: Sequence[Scenario], soak_here: set[str]) -> list[Any]:
    """``scenarios`` as parameters, those in ``soak_here`` marked ``soak``: make test runs each scenario
    in at least one direction (the costlier one left to make verify), make verify runs both."""
    return [pytest.param(s, id=s.id, marks=pytest.mark.soak if s.id in soak_here else ()) for s in scenarios]


SCENARIOS = (
    DELETION_VECTORS,  # with checkpoints of the classic policy
    CHANGE_DATA_FEED,
    _column_mapping("name"),
    _column_mapping("id"),
    GENERATED,
    CLUSTERING,
    TIMESTAMPS_RESTORE_VACUUM,
    _checkpoints("v2"),
)


def _parameter(key: str, value: str | None) -> Any:
    """An operation parameter as compared: properties as a mapping (the engines order their JSON apart)."""
    return json.loads(value) if key == "properties" and value is not None else value


def assert_reading(scenario: Scenario, reading: dict[str, Any], path: str) -> None:
    """One engine's reading of the scenario's table at ``path`` is what the scenario says (but ``numFiles``)."""
    assert reading["rows"] == [scenario.rows, *(scenario.old[v] for v in sorted(scenario.old))]
    assert operations(reading) == list(scenario.operations)
    assert [h[0] for h in reading["history"]] == list(range(len(scenario.operations)))
    for version, expected in scenario.parameters.items():
        recorded = reading["history"][version][2]
        assert {k: _parameter(k, recorded.get(k)) for k in expected} == {
            k: _parameter(k, v) for k, v in expected.items()
        }, (version, recorded)
    detail = dict(reading["detail"])
    assert detail.pop("format") == "delta"
    detail.pop("numFiles")
    if scenario.ict_from is not None:
        stamp = detail["properties"].pop("delta.inCommitTimestampEnablementTimestamp")
        assert int(stamp) == in_commit_timestamps(path)[scenario.ict_from]
    assert detail == scenario.detail
    if scenario.feed is not None:
        assert reading["feed"] == scenario.feed
