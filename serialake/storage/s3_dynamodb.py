"""Delta's DynamoDB commit protocol for S3 logs: delta-spark's ``io.delta.storage.S3DynamoDBLogStore``.

delta-spark's multi-cluster S3 writers cannot see a conditional PUT: they exclude each other
through a DynamoDB table holding one item per commit, keyed by the table's path (``tablePath``,
HASH) and the commit's file name (``fileName``, RANGE). serialake speaks the same protocol on
the same items, so its writers and delta-spark's exclude each other and each completes the
other's interrupted commits. Learned from delta-io/delta,
``storage-s3-dynamodb/src/main/java/io/delta/storage/{BaseExternalLogStore,S3DynamoDBLogStore,
ExternalCommitEntry}.java`` and the Delta docs ("S3 multi-cluster writes").

A commit of version N (``<table>/_delta_log/N.json``):

0. N.json exists: the version is taken.
1. The previous commit is complete: an incomplete entry of N-1 is completed first ("fixed up"),
   otherwise N-1.json must exist.
2. The commit's bytes are PUT at ``_delta_log/.tmp/N.json.<uuid>`` (its ``tempPath``, relative
   to ``_delta_log``).
3. The decisive step: PutItem ``{tablePath, fileName, tempPath, complete: "false"}`` on
   condition ``attribute_not_exists(fileName)``. The writer whose item lands owns version N;
   a lost response is told from a lost race by the item's ``tempPath``.
4. The temp file is copied to N.json (here a conditional PUT, ``If-None-Match: *``).
5. The item is put again with ``complete: "true"`` and ``expireTime`` (epoch seconds, now plus
   ``ddb.ttl``, one day by default: DynamoDB's TTL may delete it after that).

Anyone who finds an incomplete item (a writer that died after step 3) copies its temp file to
its name and marks it complete: readers before listing the log (the latest item) and after
missing a commit file by name (that name's item), writers before writing N+1 (step 1) and when
they lose the PutItem race (so the winner's commit is there to read).

serialake adds what the protocol lets it see of writers outside it (a conditional-PUT writer,
delta-spark's default ``S3SingleDriverLogStore``, another DynamoDB table or region, the other
spelling of the path): a commit file no item accounts for, in a table whose items are recent,
and a copy refused because the name holds other bytes, are refused with
``CommitProtocolMismatchError`` (docs/architecture.md, "Object storage").

boto3 is imported only when the protocol is configured (the ``dynamodb`` extra).
"""

from __future__ import annotations

import errno
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from serialake.exceptions import (
    CommitProtocolMismatchError,
    CorruptLogError,
    DeltaIllegalArgumentException,
    FileAlreadyExistsError,
)
from serialake.storage.base import FileStatus, WriteNotDoneError, WriteOutcomeUnknownError

__all__ = [
    "ATTR_COMPLETE",
    "ATTR_EXPIRE_TIME",
    "ATTR_FILE_NAME",
    "ATTR_TABLE_PATH",
    "ATTR_TEMP_PATH",
    "BASE_CONF_PREFIX",
    "DYNAMODB_LOG_STORE",
    "DynamoDBCommitTable",
    "DynamoDBCommits",
    "DynamoDBSettings",
    "ENDPOINT",
    "ENV_ENDPOINT",
    "ENV_LOCKING_PROVIDER",
    "ENV_REGION",
    "ENV_TABLE_NAME",
    "ExternalCommitEntry",
    "FaultHook",
    "S3Objects",
    "SESSION_PREFIXES",
    "SPARK_CONF_PREFIX",
    "TEMP_DIR",
    "clear",
    "commits_for",
    "is_option",
    "settings_for",
    "split_commit_path",
    "table_path_key",
]

log = logging.getLogger("serialake")

#: The log store class delta-spark users name for this protocol.
DYNAMODB_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"

# delta-spark's settings: ``<prefix>.<name>`` with either prefix (two different values are an error).
SPARK_CONF_PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore"
BASE_CONF_PREFIX = "io.delta.storage.S3DynamoDBLogStore"
TABLE_NAME = "ddb.tableName"
TABLE_NAME_DEFAULT = "delta_log"
REGION = "ddb.region"
REGION_DEFAULT = "us-east-1"
TTL = "ddb.ttl"  # seconds a complete item must outlive its commit; too low can lose data
TTL_DEFAULT = 86_400
CREDENTIALS_PROVIDER = "credentials.provider"
CREDENTIALS_PROVIDER_DEFAULT = "com.amazonaws.auth.DefaultAWSCredentialsProviderChain"
CREATE_TABLE_RCU = "provisionedThroughput.rcu"  # only when the DynamoDB table is created here
CREATE_TABLE_RCU_DEFAULT = 5
CREATE_TABLE_WCU = "provisionedThroughput.wcu"
CREATE_TABLE_WCU_DEFAULT = 5
READ_RETRIES = "read.retries"  # delta-spark's retries of S3A's changed-ETag reads: accepted, nothing to do here
_KNOWN_PARAMS = frozenset(
    {TABLE_NAME, REGION, TTL, CREDENTIALS_PROVIDER, CREATE_TABLE_RCU, CREATE_TABLE_WCU, READ_RETRIES}
)

#: serialake's own setting (``spark.`` prefix optional): delta-spark's DynamoDB client has no endpoint option.
ENDPOINT = "spark.serialake.dynamodb.endpoint"

# The core API without Spark: the environment (delta-rs's variable names where it had them).
ENV_LOCKING_PROVIDER = "AWS_S3_LOCKING_PROVIDER"  # "dynamodb": every s3:// and s3a:// table
ENV_TABLE_NAME = "DELTA_DYNAMO_TABLE_NAME"
ENV_REGION = "AWS_REGION_DYNAMODB"  # not AWS_REGION: delta-spark's default region is us-east-1 whatever it says
ENV_ENDPOINT = "AWS_ENDPOINT_URL_DYNAMODB"  # then AWS_ENDPOINT_URL (as boto3 reads them)

#: Spark settings that concern the protocol (``serialake.configure(spark)`` passes them on).
SESSION_PREFIXES = (
    "spark.delta.logStore.",
    "delta.logStore.",
    SPARK_CONF_PREFIX + ".",
    BASE_CONF_PREFIX + ".",
    "spark.hadoop." + BASE_CONF_PREFIX + ".",
    "spark.serialake.dynamodb.",
)

# The item's attributes, as delta-spark names and types them (all strings but expireTime, a number).
ATTR_TABLE_PATH = "tablePath"
ATTR_FILE_NAME = "fileName"
ATTR_TEMP_PATH = "tempPath"
ATTR_COMPLETE = "complete"
ATTR_EXPIRE_TIME = "expireTime"

#: Where temp files go, relative to ``_delta_log``.
TEMP_DIR = ".tmp"

_COMMIT_PATH = re.compile(r"^(?P<table>.+)/_delta_log/(?P<name>\d+\.json)$")
_CLOCK_SKEW_S = 300  # between this machine's clock and S3's object times
_PUT_ATTEMPTS = 3
_FIX_ATTEMPTS = 4  # delta-spark's: the first try and 3 retries


#: ``fault_hook(step, path)``: called at steps of a commit (``DynamoDBCommits.commit``).
FaultHook = Callable[[str, str], None]


class S3Objects(Protocol):
    """The object operations the protocol runs on (``S3LogStore``'s, without any commit protocol)."""

    def get_object(self, path: str) -> bytes: ...  # FileNotFoundError when absent

    def head_object(self, path: str) -> FileStatus | None: ...

    def create_object(self, path: str, data: bytes) -> None: ...  # If-None-Match: FileAlreadyExistsError

    def put_object(self, path: str, data: bytes) -> None: ...

    def delete_object(self, path: str) -> None: ...


# -- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamoDBSettings:
    """Where a scheme's commits are arbitrated: DynamoDB table, region, endpoint, and the item TTL."""

    table_name: str = TABLE_NAME_DEFAULT
    region: str = REGION_DEFAULT
    endpoint: str | None = None
    ttl_s: int = TTL_DEFAULT
    rcu: int = CREATE_TABLE_RCU_DEFAULT
    wcu: int = CREATE_TABLE_WCU_DEFAULT
    credentials_provider: str = CREDENTIALS_PROVIDER_DEFAULT
    #: S3's access key, secret and session token, for S3A's credential providers (not shown).
    s3_credentials: tuple[str, str, str | None] | None = field(default=None, repr=False)

    def describe(self) -> str:
        """``DynamoDB table delta_log (us-east-1)``, for messages."""
        where = f"{self.region}" + (f", {self.endpoint}" if self.endpoint else "")
        return f"DynamoDB table {self.table_name} ({where})"


def is_option(key: str) -> bool:
    """Whether ``key`` (``spark.hadoop.`` removed) is a setting of the protocol."""
    return key.startswith(SESSION_PREFIXES) or key == ENDPOINT.removeprefix("spark.")


def _log_store_impl(scheme: str, options: Mapping[str, str]) -> str | None:
    """The log store class ``options`` name for ``scheme`` (None: not set), with delta-spark's checks."""

    def one(spark_key: str) -> tuple[str, str] | None:
        plain_key = spark_key.removeprefix("spark.")
        a, b = options.get(spark_key), options.get(plain_key)
        if a is not None and b is not None and a != b:
            raise DeltaIllegalArgumentException(
                f"Log store settings {spark_key}={a} and {plain_key}={b} differ: set only one."
            )
        if a is not None:
            return spark_key, a
        return (plain_key, b) if b is not None else None

    by_class = one("spark.delta.logStore.class")
    impls = sorted(k for k in options if k.endswith(".impl") and k.removeprefix("spark.").startswith("delta.logStore."))
    if by_class is not None and impls:
        raise DeltaIllegalArgumentException(
            f"Log store settings {by_class[0]} and {', '.join(impls)} are both set; delta-spark refuses "
            "that too: set only the per-scheme ones (spark.delta.logStore.<scheme>.impl)."
        )
    found = one(f"spark.delta.logStore.{scheme}.impl") or by_class
    return found[1].strip() if found is not None else None


def _param(options: Mapping[str, str], name: str) -> str | None:
    spark_key, base_key = f"{SPARK_CONF_PREFIX}.{name}", f"{BASE_CONF_PREFIX}.{name}"
    a, b = options.get(spark_key), options.get(base_key)
    if a is not None and b is not None and a != b:
        raise DeltaIllegalArgumentException(
            f"Settings {spark_key}={a} and {base_key}={b} have different values: set only one."
        )
    return a if a is not None else b


def _int_param(options: Mapping[str, str], name: str, default: int) -> int:
    text = _param(options, name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise DeltaIllegalArgumentException(f"{BASE_CONF_PREFIX}.{name} must be a whole number, not {text!r}") from None
    if value < 0:
        raise DeltaIllegalArgumentException(f"{BASE_CONF_PREFIX}.{name} must not be negative ({value})")
    return value


def settings_for(
    scheme: str, options: Mapping[str, str], environ: Mapping[str, str]
) -> DynamoDBSettings | None:
    """The DynamoDB settings of ``scheme`` (``s3`` / ``s3a``) tables, or None: they commit by conditional PUT.

    ``options``: Spark's names (``spark.delta.logStore.<scheme>.impl``, ``spark.io.delta.storage.
    S3DynamoDBLogStore.ddb.*``, with or without the ``spark.`` prefix), as ``S3LogStore``'s
    ``configure`` keeps them. Without a log store setting, ``AWS_S3_LOCKING_PROVIDER=dynamodb``
    in ``environ`` turns the protocol on. Inconsistent settings raise ``DeltaIllegalArgumentException``.
    """
    unknown = sorted(
        k for k in options
        if k.startswith((SPARK_CONF_PREFIX + ".", BASE_CONF_PREFIX + "."))
        and k.split("S3DynamoDBLogStore.", 1)[1] not in _KNOWN_PARAMS
    )  # fmt: skip
    unknown += sorted(k for k in options if k.removeprefix("spark.").startswith("serialake.dynamodb.")
                      and k.removeprefix("spark.") != ENDPOINT.removeprefix("spark."))
    if unknown:
        raise DeltaIllegalArgumentException(
            f"Unknown S3DynamoDBLogStore setting {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_PARAMS))})"
        )
    impl = _log_store_impl(scheme, options)
    if impl is None:
        if environ.get(ENV_LOCKING_PROVIDER, "").strip().lower() != "dynamodb":
            return None
    elif impl != DYNAMODB_LOG_STORE:
        return None  # S3SingleDriverLogStore and the like: serialake's conditional PUT
    endpoint = options.get(ENDPOINT) or options.get(ENDPOINT.removeprefix("spark."))
    endpoint = endpoint or environ.get(ENV_ENDPOINT) or environ.get("AWS_ENDPOINT_URL") or None
    return DynamoDBSettings(
        table_name=_param(options, TABLE_NAME) or environ.get(ENV_TABLE_NAME) or TABLE_NAME_DEFAULT,
        region=_param(options, REGION) or environ.get(ENV_REGION) or REGION_DEFAULT,
        endpoint=endpoint,
        ttl_s=_int_param(options, TTL, TTL_DEFAULT),
        rcu=_int_param(options, CREATE_TABLE_RCU, CREATE_TABLE_RCU_DEFAULT),
        wcu=_int_param(options, CREATE_TABLE_WCU, CREATE_TABLE_WCU_DEFAULT),
        credentials_provider=_param(options, CREDENTIALS_PROVIDER) or CREDENTIALS_PROVIDER_DEFAULT,
    )


# -- items --------------------------------------------------------------------------------------


def split_commit_path(path: str) -> tuple[str, str] | None:
    """``(table URI, file name)`` of a commit file ``<table>/_delta_log/<N>.json``; None for other files."""
    m = _COMMIT_PATH.match(path)
    return (m.group("table"), m.group("name")) if m else None


def table_path_key(table_uri: str) -> str:
    """The item's ``tablePath`` for a (normalised) table URI, as delta-spark writes it.

    delta-spark takes the commit file's Hadoop path, qualified, user info removed, and its
    grandparent's string: the scheme as the user spelled it (``s3://b/t`` and ``s3a://b/t``
    are different keys), no trailing slash, except a table at the bucket's root (``s3a://b/``).
    """
    scheme, rest = table_uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    bucket = bucket.rpartition("@")[2]
    key = "/".join(p for p in key.split("/") if p)
    return f"{scheme.lower()}://{bucket}/{key}"


def _other_spelling(table_path: str) -> str:
    scheme, rest = table_path.split("://", 1)
    return ("s3a" if scheme == "s3" else "s3") + "://" + rest


@dataclass(frozen=True)
class ExternalCommitEntry:
    """One item of the DynamoDB table: commit ``file_name`` of the table ``table_path`` (delta-spark's name)."""

    table_path: str
    file_name: str
    temp_path: str  # relative to ``_delta_log``
    complete: bool
    expire_time: int | None = None  # epoch seconds; only on complete items

    def to_item(self) -> dict[str, dict[str, str]]:
        """The item as DynamoDB's API takes it, attribute for attribute as delta-spark writes it."""
        item = {
            ATTR_TABLE_PATH: {"S": self.table_path},
            ATTR_FILE_NAME: {"S": self.file_name},
            ATTR_TEMP_PATH: {"S": self.temp_path},
            ATTR_COMPLETE: {"S": "true" if self.complete else "false"},
        }
        if self.expire_time is not None:
            item[ATTR_EXPIRE_TIME] = {"N": str(self.expire_time)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Mapping[str, str]]) -> ExternalCommitEntry:
        expire = item.get(ATTR_EXPIRE_TIME)
        return cls(
            table_path=item[ATTR_TABLE_PATH]["S"],
            file_name=item[ATTR_FILE_NAME]["S"],
            temp_path=item[ATTR_TEMP_PATH]["S"],
            complete=item[ATTR_COMPLETE]["S"] == "true",
            expire_time=int(expire["N"]) if expire is not None else None,
        )

    def as_complete(self, ttl_s: int) -> ExternalCommitEntry:
        return ExternalCommitEntry(self.table_path, self.file_name, self.temp_path, True, int(time.time()) + ttl_s)

    @property
    def version(self) -> int:
        return int(self.file_name.split(".", 1)[0])


# -- the DynamoDB table -------------------------------------------------------------------------


class _EntryExists(Exception):
    """The conditional PutItem found an item for that commit."""


def _failure_kind(error: BaseException) -> str:
    """``exists``, ``not-done`` (refused, or never sent) or ``unknown`` (may have been applied)."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, HTTPClientError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code == "ConditionalCheckFailedException":
            return "exists"
        return "unknown" if status >= 500 or code in ("InternalServerError", "ServiceUnavailable") else "not-done"
    if isinstance(error, EndpointConnectionError):
        return "not-done"  # no connection: nothing was sent
    if isinstance(error, HTTPClientError):
        return "unknown"  # read timeout, connection closed: sent, no answer
    if isinstance(error, BotoCoreError):
        return "not-done"  # credentials, parameters: refused before sending
    return "unknown"


def _errno_of(error: BaseException) -> int:
    from botocore.exceptions import ClientError, EndpointConnectionError

    if isinstance(error, EndpointConnectionError):
        return errno.ECONNREFUSED
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if "Throughput" in code or "Throttl" in code or code == "RequestLimitExceeded":
            return errno.EAGAIN
        if code in ("AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
                    "ExpiredTokenException", "MissingAuthenticationTokenException"):  # fmt: skip
            return errno.EACCES
        if code == "ResourceNotFoundException":
            return errno.ENOENT
    return errno.EIO


class DynamoDBCommitTable:
    """The DynamoDB table of commit items (made with delta-spark's schema when absent)."""

    def __init__(self, settings: DynamoDBSettings) -> None:
        from serialake.extras import require

        boto3 = require("boto3", "Delta's DynamoDB commit protocol (io.delta.storage.S3DynamoDBLogStore)")
        from botocore.config import Config

        self.settings = settings
        session = boto3.session.Session()
        kwargs: dict[str, Any] = {"region_name": settings.region}
        if settings.endpoint:
            kwargs["endpoint_url"] = settings.endpoint
        provider = settings.credentials_provider.rsplit(".", 1)[-1]
        creds = settings.s3_credentials
        if creds is not None and (
            provider in ("SimpleAWSCredentialsProvider", "TemporaryAWSCredentialsProvider")
            or session.get_credentials() is None
        ):  # S3A's providers read fs.s3a.access.key & co.; and nothing else found: S3's keys
            kwargs.update(aws_access_key_id=creds[0], aws_secret_access_key=creds[1], aws_session_token=creds[2])
        timeouts: dict[str, Any] = {"connect_timeout": 5, "read_timeout": 20}
        self._client = session.client(
            "dynamodb", config=Config(retries={"max_attempts": 4, "mode": "standard"}, **timeouts), **kwargs
        )
        # The conditional PutItem is sent once per call: a retry inside the SDK would hide which
        # attempt's error is reported, and whether an earlier one landed.
        self._once = session.client("dynamodb", config=Config(retries={"total_max_attempts": 1}, **timeouts), **kwargs)
        self._ensure_table()

    def _failed(self, request: str, error: BaseException) -> OSError:
        return OSError(_errno_of(error), f"DynamoDB {request} on {self.settings.describe()} failed: {error}")

    def _ensure_table(self) -> None:
        """Create the table when absent (delta-spark's key schema, provisioned throughput), wait until active."""
        from botocore.exceptions import BotoCoreError, ClientError

        name = self.settings.table_name
        created = False
        for _ in range(20):
            try:
                status = self._client.describe_table(TableName=name)["Table"]["TableStatus"]
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                    raise self._failed("DescribeTable", e) from e
                status = "CREATING"
                try:
                    self._client.create_table(
                        TableName=name,
                        AttributeDefinitions=[
                            {"AttributeName": ATTR_TABLE_PATH, "AttributeType": "S"},
                            {"AttributeName": ATTR_FILE_NAME, "AttributeType": "S"},
                        ],
                        KeySchema=[
                            {"AttributeName": ATTR_TABLE_PATH, "KeyType": "HASH"},
                            {"AttributeName": ATTR_FILE_NAME, "KeyType": "RANGE"},
                        ],
                        ProvisionedThroughput={
                            "ReadCapacityUnits": self.settings.rcu, "WriteCapacityUnits": self.settings.wcu,
                        },
                    )  # fmt: skip
                    created = True
                    log.info("created %s for Delta commits", self.settings.describe())
                except ClientError as e2:
                    if e2.response.get("Error", {}).get("Code") != "ResourceInUseException":
                        raise self._failed("CreateTable", e2) from e2
            except BotoCoreError as e:
                raise self._failed("DescribeTable", e) from e
            if status != "CREATING":
                return
            time.sleep(0.05 if created else 1.0)
        raise OSError(errno.ETIMEDOUT, f"{self.settings.describe()} was still being created after 20 tries")

    def get(self, table_path: str, file_name: str) -> ExternalCommitEntry | None:
        """The item of one commit (a consistent read), or None."""
        try:
            got = self._client.get_item(
                TableName=self.settings.table_name,
                Key={ATTR_TABLE_PATH: {"S": table_path}, ATTR_FILE_NAME: {"S": file_name}},
                ConsistentRead=True,
            )
        except Exception as e:  # noqa: BLE001 - botocore's errors, classified in the message
            raise self._failed("GetItem", e) from e
        item = got.get("Item")
        return ExternalCommitEntry.from_item(item) if item else None

    def latest(self, table_path: str) -> ExternalCommitEntry | None:
        """The item of the table's newest commit (by file name, a consistent read), or None."""
        try:
            got = self._client.query(
                TableName=self.settings.table_name,
                KeyConditionExpression="#t = :t",
                ExpressionAttributeNames={"#t": ATTR_TABLE_PATH},
                ExpressionAttributeValues={":t": {"S": table_path}},
                ScanIndexForward=False,
                Limit=1,
                ConsistentRead=True,
            )
        except Exception as e:  # noqa: BLE001
            raise self._failed("Query", e) from e
        items = got.get("Items") or []
        return ExternalCommitEntry.from_item(items[0]) if items else None

    def put_new(self, entry: ExternalCommitEntry, path: str) -> None:
        """The decisive PutItem: ``_EntryExists`` when the commit has an item, ``WriteNotDoneError`` when
        certainly not applied, ``WriteOutcomeUnknownError`` when it may have been."""
        try:
            self._once.put_item(
                TableName=self.settings.table_name,
                Item=entry.to_item(),
                ConditionExpression="attribute_not_exists(#f)",
                ExpressionAttributeNames={"#f": ATTR_FILE_NAME},
            )
        except Exception as e:  # noqa: BLE001
            kind = _failure_kind(e)
            if kind == "exists":
                raise _EntryExists() from None
            phase = f"put the commit's item in {self.settings.describe()}"
            if kind == "not-done":
                raise WriteNotDoneError(self._failed("PutItem", e), path, phase) from e
            raise WriteOutcomeUnknownError(self._failed("PutItem", e), path, phase) from e

    def put_complete(self, entry: ExternalCommitEntry) -> None:
        """Overwrite the item (no condition): the commit is at its name."""
        try:
            self._client.put_item(TableName=self.settings.table_name, Item=entry.to_item())
        except Exception as e:  # noqa: BLE001
            raise self._failed("PutItem", e) from e


# -- the protocol -------------------------------------------------------------------------------


class DynamoDBCommits:
    """Commits, fix-ups and the checks for writers outside the protocol, over one DynamoDB table."""

    def __init__(self, table: DynamoDBCommitTable) -> None:
        self.table = table
        self.settings = table.settings

    # The commit ----------------------------------------------------------------------------------

    def commit(self, objects: S3Objects, path: str, data: bytes, hook: FaultHook | None = None) -> None:
        """Create commit file ``path`` holding ``data`` (``LogStore.put_if_absent``'s contract).

        ``hook(step, path)`` runs at ``temp`` (before the temp file's PUT: an ``OSError`` is that
        PUT's failure), ``entry-put`` (after the PutItem landed: an ``OSError`` is a lost
        response), ``copy`` and ``copied`` (around the copy; after it: a lost response) and
        ``complete``. Anything else it raises ends the commit there, as a crash would.
        """
        split = split_commit_path(path)
        if split is None:
            raise DeltaIllegalArgumentException(f"Not a commit file: {path}")
        table_uri, name = split
        key = table_path_key(table_uri)
        log_dir = f"{table_uri}/_delta_log"
        version = int(name[:-5])
        # 0. The version is taken (and if no item accounts for it, by a writer outside the protocol).
        status = self._head(objects, path, "look for the commit file")
        if status is not None:
            try:
                self._check_accounted(table_uri, key, name, status, path)
            except WriteNotDoneError:
                pass  # not known now: the attempt at the next version looks again (step 1)
            raise FileAlreadyExistsError(f"{path} already exists")
        # 1. The previous commit is complete.
        if version > 0:
            self._previous_complete(objects, table_uri, key, f"{version - 1:0{len(name) - 5}d}.json", path)
        else:
            self._no_stale_items(table_uri, key, name, path)
        # 2. Prepare: the bytes at a temp name.
        entry = ExternalCommitEntry(key, name, f"{TEMP_DIR}/{name}.{uuid.uuid4()}", complete=False)
        temp = f"{log_dir}/{entry.temp_path}"
        try:
            if hook is not None:
                hook("temp", temp)
            objects.put_object(temp, data)
        except OSError as e:
            raise WriteNotDoneError(e, path, f"PUT the commit's temp file {temp}") from e
        # 3. The decisive step.
        self._claim(objects, table_uri, entry, path, hook)
        # 4. The commit at its name, 5. acknowledged in DynamoDB.
        self._copy_own(objects, table_uri, entry, path, data, hook)
        self._mark_complete(entry, hook, path)

    def _head(self, objects: S3Objects, path: str, phase: str) -> FileStatus | None:
        try:
            return objects.head_object(path)
        except OSError as e:
            raise WriteNotDoneError(e, path, phase) from e

    def _get(self, table_path: str, name: str, path: str, phase: str) -> ExternalCommitEntry | None:
        try:
            return self.table.get(table_path, name)
        except OSError as e:
            raise WriteNotDoneError(e, path, phase) from e

    def _previous_complete(self, objects: S3Objects, table_uri: str, key: str, prev_name: str, path: str) -> None:
        prev = self._get(key, prev_name, path, f"read the item of the previous commit {prev_name}")
        if prev is not None and not prev.complete:
            try:
                self._fix(objects, table_uri, prev, strict=True)
            except OSError as e:  # CorruptLogError included: its message says what to do
                raise WriteNotDoneError(e, path, f"complete the previous commit {prev_name}") from e
            return
        prev_path = f"{table_uri}/_delta_log/{prev_name}"
        status = self._head(objects, prev_path, "look for the previous commit file")
        if status is None:
            raise WriteNotDoneError(
                OSError(errno.ENOENT, f"the previous commit {prev_name} is not in the log", prev_path), path,
                f"find the previous commit {prev_name}",
            )  # fmt: skip
        if prev is None:
            self._check_accounted(table_uri, key, prev_name, status, path)

    def _no_stale_items(self, table_uri: str, key: str, name: str, path: str) -> None:
        """Version 0 of a table whose path still has items of a deleted table: refused (as delta-spark does)."""
        first = self._get(key, name, path, f"read the item of {name}")
        if first is not None and first.complete:
            raise CommitProtocolMismatchError(
                f"Table {table_uri}: {self.settings.describe()} still holds the items of a table that was "
                f"at this path (tablePath {key}, commit {name} complete), but the log has no {name}. "
                "Nothing was committed.\n"
                f"Help: delete the items with tablePath = {key} from {self.settings.table_name} (or wait until "
                "their expireTime passes with TTL on), then create the table again.",
                table=table_uri, version=0, combination="dynamodb items of a deleted table",
            )  # fmt: skip

    def _claim(
        self, objects: S3Objects, table_uri: str, entry: ExternalCommitEntry, path: str, hook: FaultHook | None
    ) -> None:
        """PutItem on condition; return when the item is ours (a lost response included), else raise."""
        unknown: OSError | None = None
        for _ in range(_PUT_ATTEMPTS):
            try:
                self.table.put_new(entry, path)
            except _EntryExists:
                break
            except WriteNotDoneError:
                if unknown is None:
                    self._drop_temp(objects, table_uri, entry)
                    raise
                break  # an earlier attempt may have landed: the item says
            except WriteOutcomeUnknownError as e:
                unknown = e
                continue  # the same item again: landed before, it is refused now, and read below
            try:
                if hook is not None:
                    hook("entry-put", path)
            except OSError as e:
                unknown = e  # the response was lost
                continue
            return
        try:
            found = self.table.get(entry.table_path, entry.file_name)
        except OSError as e:
            raise WriteOutcomeUnknownError(e, path, f"read back the commit's item in {self.settings.describe()}") from e
        if found is not None and found.temp_path == entry.temp_path:
            return  # ours: a lost response, the retry refused
        if found is None:
            cause = unknown or OSError(errno.EIO, "the conditional PutItem was refused, then no item was found")
            raise WriteOutcomeUnknownError(cause, path, f"put the commit's item in {self.settings.describe()}")
        if not found.complete:  # the winner's commit at its name before the loser reads it
            try:
                self._fix(objects, table_uri, found, strict=True)
            except OSError as e:  # the version is taken all the same; readers complete it (or say why not)
                log.info("completing commit %s of %s failed: %s", found.file_name, table_uri, e)
        self._drop_temp(objects, table_uri, entry)
        raise FileAlreadyExistsError(f"{path} already exists (in {self.settings.describe()})")

    def _drop_temp(self, objects: S3Objects, table_uri: str, entry: ExternalCommitEntry) -> None:
        """Delete a temp file no item names (best effort: a leftover is harmless)."""
        try:
            objects.delete_object(f"{table_uri}/_delta_log/{entry.temp_path}")
        except OSError:
            pass

    def _copy_own(
        self, objects: S3Objects, table_uri: str, entry: ExternalCommitEntry, path: str, data: bytes,
        hook: FaultHook | None,
    ) -> None:  # fmt: skip
        """Step 4: the commit, already ours, at its name; a name holding other bytes is a writer outside."""
        last: OSError | None = None
        for _ in range(_PUT_ATTEMPTS):
            try:
                if hook is not None:
                    hook("copy", path)
                objects.create_object(path, data)
                if hook is not None:
                    hook("copied", path)
                return
            except FileAlreadyExistsError:
                break
            except OSError as e:
                last = e  # again: if it landed, the next PUT is refused and the bytes are compared
        phase = (
            f"copy the commit to its name (version {entry.version} is this writer's in "
            f"{self.settings.describe()}; the next reader or writer of the table completes it)"
        )
        try:
            current = objects.get_object(path)
        except FileNotFoundError:
            raise WriteOutcomeUnknownError(last or OSError(errno.EIO, "copy failed"), path, phase) from last
        except OSError as e:
            raise WriteOutcomeUnknownError(e, path, phase) from e
        if current == data:
            return
        self._mark_complete(entry, None, path)  # the name is taken for good: nothing left to copy
        raise self._outside_writer(table_uri, entry, own=True)

    def _mark_complete(self, entry: ExternalCommitEntry, hook: FaultHook | None, path: str) -> None:
        """Step 5 (best effort: a commit at its name is complete whatever its item says; the next fix-up marks it)."""
        try:
            if hook is not None:
                hook("complete", path)
            self.table.put_complete(entry.as_complete(self.settings.ttl_s))
        except OSError as e:
            log.info("commit %s is at its name; marking its item complete failed: %s", path, e)

    # Fix-ups -------------------------------------------------------------------------------------

    def settle(self, objects: S3Objects, path: str) -> bool:
        """After ``path`` (a commit file) was not found: complete it if an incomplete item says it is committed.

        True when it was completed (read it again). Raises ``OSError`` when DynamoDB or S3 cannot
        be read or written: whether the commit exists is then unknown.
        """
        split = split_commit_path(path)
        if split is None:
            return False
        table_uri, name = split
        entry = self.table.get(table_path_key(table_uri), name)
        if entry is None or entry.complete:
            return False
        self._fix(objects, table_uri, entry, strict=False)
        return True

    def settle_latest(self, objects: S3Objects, log_dir: str) -> None:
        """Before listing ``log_dir``: complete the table's newest commit when its item is incomplete."""
        table_uri = log_dir.rstrip("/").removesuffix("/_delta_log")
        entry = self.table.latest(table_path_key(table_uri))
        if entry is not None and not entry.complete:
            self._fix(objects, table_uri, entry, strict=False)

    def _fix(self, objects: S3Objects, table_uri: str, entry: ExternalCommitEntry, *, strict: bool) -> None:
        """Copy an incomplete item's temp file to its name (if-none-match) and mark the item complete.

        A name already holding other bytes means a writer outside the protocol took the version:
        ``strict`` (a writer) refuses to go on, a reader logs it and reads on.
        """
        log_dir = f"{table_uri}/_delta_log"
        target, temp = f"{log_dir}/{entry.file_name}", f"{log_dir}/{entry.temp_path}"
        last: OSError | None = None
        for attempt in range(_FIX_ATTEMPTS):
            try:
                data = _get_if_exists(objects, temp)
                current = _get_if_exists(objects, target)
                if current is None:
                    if data is None:
                        raise CorruptLogError(
                            f"Table {table_uri}: commit {entry.file_name} is recorded in {self.settings.describe()} "
                            f"(incomplete) but neither its temp file {temp} nor {target} exists. Help: restore "
                            f"the temp file (an S3 lifecycle rule on _delta_log/{TEMP_DIR}/ may have removed it), "
                            "or delete the item if that commit must be dropped."
                        )
                    try:
                        objects.create_object(target, data)
                        current = data
                    except FileAlreadyExistsError:
                        current = objects.get_object(target)
                break
            except CorruptLogError:
                raise
            except OSError as e:
                last = e
                time.sleep(0.01 * 2**attempt)
        else:
            assert last is not None
            raise last
        self._mark_complete(entry, None, target)
        log.info("completed commit %s of %s from its DynamoDB item", entry.file_name, table_uri)
        if data is not None and current != data:
            error = self._outside_writer(table_uri, entry, own=False)
            if strict:
                raise error
            log.warning("%s", error)

    # Writers outside the protocol ----------------------------------------------------------------

    def _check_accounted(self, table_uri: str, key: str, name: str, status: FileStatus, path: str) -> None:
        """Refuse a recent commit file that no item accounts for, in a table whose items are recent.

        An item is put before its commit file and lives ``ddb.ttl`` after it: a younger file
        without one was not committed through this DynamoDB table.
        """
        age_s = time.time() - status.modification_time / 1000
        if status.modification_time <= 0 or age_s + _CLOCK_SKEW_S >= self.settings.ttl_s:
            return  # old enough for its item to have expired
        try:
            if self.table.get(key, name) is not None:
                return
            if self.table.latest(key) is None:
                return  # no DynamoDB writer here lately: a table moving to the protocol
            other = _other_spelling(key)
            spelled = self.table.get(other, name) is not None
        except OSError as e:
            raise WriteNotDoneError(e, path, f"read the item of {name}") from e
        version = int(name[:-5])
        who = (
            f"a DynamoDB writer that spells the table path {other} (tablePath is the path as written: "
            "s3:// and s3a:// are different keys)"
            if spelled
            else "a writer outside this DynamoDB table: serialake committing by S3 conditional PUT, delta-spark's "
            "default S3SingleDriverLogStore, delta-rs, or S3DynamoDBLogStore with another ddb.tableName or ddb.region"
        )
        raise CommitProtocolMismatchError(
            f"Table {table_uri}: commit version {version} ({name}, written {age_s:.0f}s ago) has no item in "
            f"{self.settings.describe()} under tablePath {key}, while other commits of the table do: it was "
            f"written by {who}. Writers that do not share one commit protocol can overwrite each other's "
            "commits, so this writer stops; nothing of this transaction was committed.\n"
            "Help: give every writer of the table the same protocol: spark.delta.logStore.<scheme>.impl="
            f"{DYNAMODB_LOG_STORE} with the same ddb.tableName and ddb.region, and the same URI scheme.",
            table=table_uri, version=version,
            combination="s3 and s3a spellings" if spelled else "dynamodb + writer outside it",
        )  # fmt: skip

    def _outside_writer(self, table_uri: str, entry: ExternalCommitEntry, *, own: bool) -> CommitProtocolMismatchError:
        whose = "this writer" if own else "the writer of that item"
        lost = "Nothing of this transaction is in the table" if own else "that writer's commit is lost"
        return CommitProtocolMismatchError(
            f"Table {table_uri}: version {entry.version} belongs to {whose} in {self.settings.describe()} "
            f"(item tempPath {entry.temp_path}), but {entry.file_name} holds other bytes: a writer outside the "
            "DynamoDB protocol (S3 conditional PUT, delta-spark's S3SingleDriverLogStore, delta-rs) wrote it. "
            f"{lost}.\n"
            f"Help: configure every writer of the table with {DYNAMODB_LOG_STORE} and the same DynamoDB table, "
            "region and URI scheme; check the table's recent history for the missing commit.",
            table=table_uri, version=entry.version, combination="dynamodb + writer outside it",
        )  # fmt: skip


def _get_if_exists(objects: S3Objects, path: str) -> bytes | None:
    try:
        return objects.get_object(path)
    except FileNotFoundError:
        return None


# -- one protocol object per settings -----------------------------------------------------------

_lock = threading.Lock()
_commits: dict[DynamoDBSettings, DynamoDBCommits] = {}


def commits_for(settings: DynamoDBSettings) -> DynamoDBCommits:
    """The protocol over the DynamoDB table of ``settings`` (made, and the table with it, on first use)."""
    with _lock:
        found = _commits.get(settings)
    if found is not None:
        return found
    made = DynamoDBCommits(DynamoDBCommitTable(settings))
    with _lock:
        return _commits.setdefault(settings, made)


def clear() -> None:
    """Forget the clients made so far (new settings, a new endpoint)."""
    with _lock:
        _commits.clear()
