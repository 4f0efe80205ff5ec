"""S3 log store: put-if-absent by a conditional PUT (``If-None-Match: *``), never a rename.

Table URIs are ``s3://bucket/path`` (``s3a://`` is the same store, as Spark users spell it).
Requests go through ``obstore`` (Rust ``object_store``, the library delta-rs uses; one
wheel): measured here 1.5-5x faster per conditional PUT than boto3 against a local server,
and its ``mode="create"`` is exactly S3's conditional write.

Outcomes of a commit PUT, and what the commit loop (``core.txn.transaction``) does with them:

- 200: committed.
- 412 Precondition Failed: the version exists (``FileAlreadyExistsError``). It may be our
  own commit, when a response was lost and the PUT was retried: the loop reads the winners
  and recognises its own ``txnId`` (delta-rs commits twice here).
- 409 ``ConditionalRequestConflict`` (real S3 under racing conditional PUTs): nothing was
  written; the same version is tried again (``WriteNotDoneError`` with EAGAIN).
- 403 / 401 / 400 / 404 bucket: certainly not written (``WriteNotDoneError``).
- a timeout, a dropped connection, a 5xx after the retries: the PUT may have landed
  (``WriteOutcomeUnknownError``); the loop reads the log to decide.

Checkpoints and ``_last_checkpoint`` are plain PUTs (atomic on S3: a reader sees the old
object or the new one). Commits are never multipart. Listing starts at a key
(``list_from``), so a refresh lists only the newest commits.

Configuration, in order: ``configure(...)`` (options named as Spark's S3A ones or
object_store's), then the standard AWS environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``, ``AWS_ALLOW_HTTP``).

The commit protocol is chosen per URI scheme, as delta-spark users choose it: with
``spark.delta.logStore.<s3|s3a>.impl=io.delta.storage.S3DynamoDBLogStore`` (given to
``configure``, or ``AWS_S3_LOCKING_PROVIDER=dynamodb`` in the environment) commits go through
Delta's DynamoDB protocol (``storage/s3_dynamodb.py``), and reads complete the commits it
left incomplete; otherwise by conditional PUT, which refuses a table whose log shows
DynamoDB writers (objects under ``_delta_log/.tmp/``, looked for at a table's first commit
in a process, again after ``TRACE_CHECK_INTERVAL_S`` and after every lost race).
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import os
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from serialake.exceptions import CommitProtocolMismatchError, DeltaIllegalArgumentException, FileAlreadyExistsError
from serialake.storage import s3_dynamodb
from serialake.storage.base import FileStatus, LogStore, WriteNotDoneError, WriteOutcomeUnknownError

__all__ = [
    "S3_SCHEMES",
    "S3LogStore",
    "SESSION_PREFIXES",
    "TRACE_CHECK_INTERVAL_S",
    "configure",
    "dynamodb_commits",
    "normalize_s3_uri",
    "reset",
    "session_options",
    "split_s3_uri",
    "store_with",
    "worker_access",
]

S3_SCHEMES = ("s3", "s3a")

# Spark / Hadoop S3A option names (``spark.hadoop.`` prefix optional) -> object_store's.
_S3A_KEYS = {
    "fs.s3a.endpoint": "endpoint",
    "fs.s3a.access.key": "access_key_id",
    "fs.s3a.secret.key": "secret_access_key",
    "fs.s3a.session.token": "session_token",
    "fs.s3a.endpoint.region": "region",
    "fs.s3a.path.style.access": "virtual_hosted_style_request",
    "fs.s3a.connection.ssl.enabled": "allow_http",
}
# S3A settings that say the opposite of the object_store setting they map to.
_INVERTED = frozenset({"fs.s3a.path.style.access", "fs.s3a.connection.ssl.enabled"})
_OBJECT_STORE_KEYS = frozenset(
    {"endpoint", "access_key_id", "secret_access_key", "session_token", "region", "virtual_hosted_style_request",
     "allow_http", "skip_signature"}
)  # fmt: skip

#: Spark settings a session gives the store (``serialake.configure(spark)``): S3A's and the commit protocol's.
SESSION_PREFIXES = ("spark.hadoop.fs.s3a.", *s3_dynamodb.SESSION_PREFIXES)

#: Seconds a table found without DynamoDB-protocol traces is trusted before a commit looks again.
TRACE_CHECK_INTERVAL_S = 30.0

_lock = threading.Lock()
_options: dict[str, str] = {}
_commit_options: dict[str, str] = {}  # the commit protocol's settings, by Spark's names
_stores: dict[str, Any] = {}
_traces_checked: dict[str, float] = {}  # table URI -> when its log last showed no DynamoDB traces


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key`` (the key without a leading slash)."""
    parsed = urlparse(uri)
    if parsed.scheme.lower() not in S3_SCHEMES or not parsed.netloc:
        raise DeltaIllegalArgumentException(f"Not an S3 URI with a bucket: {uri!r} (expected s3://bucket/path)")
    return parsed.netloc, parsed.path.lstrip("/")


def normalize_s3_uri(uri: str) -> str:
    """``s3://bucket/a/b`` without a trailing slash or doubled slashes (the scheme kept as given)."""
    bucket, key = split_s3_uri(uri)
    scheme = uri.split("://", 1)[0].lower()
    parts = [p for p in key.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise DeltaIllegalArgumentException(f"S3 table URI {uri!r} contains '..'")
    return f"{scheme}://{bucket}" + ("/" + "/".join(parts) if parts else "")


def configure(options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
    """Set S3 options for every table of this process: S3A names (``fs.s3a.endpoint``,
    ``fs.s3a.access.key``, ``fs.s3a.path.style.access``, ... with or without
    ``spark.hadoop.``) or object_store's (``endpoint``, ``access_key_id``, ``allow_http``, ...),
    and the commit protocol's, named as delta-spark's (``spark.delta.logStore.s3a.impl``,
    ``spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName``, ...: ``storage.s3_dynamodb``).
    Stores made earlier are dropped, so the new options apply to the next request."""
    given = {**(options or {}), **kwargs}
    translated: dict[str, str] = {}
    commit: dict[str, str] = {}
    for raw, value in given.items():
        key = raw.removeprefix("spark.hadoop.")
        text = str(value).strip()
        if s3_dynamodb.is_option(key):
            commit[key] = text
        elif key in _S3A_KEYS:
            if key in _INVERTED:
                text = "false" if text.lower() == "true" else "true"
            translated[_S3A_KEYS[key]] = text
        elif key in _OBJECT_STORE_KEYS:
            translated[key] = text
        elif key.startswith("fs.s3a."):
            continue  # S3A tuning (connection pools, committers) has no meaning here
        else:
            raise DeltaIllegalArgumentException(f"Unknown S3 option {raw!r}")
    with _lock:
        merged = {**_commit_options, **commit}
    for scheme in S3_SCHEMES:
        s3_dynamodb.settings_for(scheme, merged, os.environ)  # inconsistent settings: refused here
    with _lock:
        _options.update(translated)
        _commit_options.update(commit)
        _stores.clear()
        _worker_stores.clear()
        _traces_checked.clear()
    s3_dynamodb.clear()


def reset() -> None:
    """Forget every ``configure(...)`` option and the clients made with them (tests; a change of account)."""
    with _lock:
        _options.clear()
        _commit_options.clear()
        _stores.clear()
        _worker_stores.clear()
        _traces_checked.clear()
    s3_dynamodb.clear()


def session_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of a Spark configuration the store takes (``SESSION_PREFIXES``)."""
    return {k: v for k, v in conf.items() if k.startswith(SESSION_PREFIXES)}


def dynamodb_commits(uri: str) -> s3_dynamodb.DynamoDBCommits | None:
    """The DynamoDB commit protocol of ``uri``'s scheme, or None: that scheme commits by conditional PUT.

    The one door for the choice: decided at each call from ``configure(...)`` and the
    environment, so a log made before a ``configure`` call follows it.
    """
    scheme = uri.split("://", 1)[0].lower()
    with _lock:
        options = dict(_commit_options)
    settings = s3_dynamodb.settings_for(scheme, options, os.environ)
    if settings is None:
        return None
    config = worker_access()["config"]
    if config.get("access_key_id") and config.get("secret_access_key"):
        keys = (str(config["access_key_id"]), str(config["secret_access_key"]), config.get("session_token"))
        settings = dataclasses.replace(settings, s3_credentials=keys)
    return s3_dynamodb.commits_for(settings)


def _store(bucket: str) -> Any:
    with _lock:
        store = _stores.get(bucket)
        if store is not None:
            return store
        store = _build(bucket, _resolved_config())
        _stores[bucket] = store
        return store


def _resolved_config() -> dict[str, Any]:
    """The object_store settings this process uses: ``configure(...)`` options over the AWS
    environment variables, plus the client's timeouts and whether plain HTTP is allowed."""
    opts = dict(_options)
    env = os.environ
    endpoint = opts.pop("endpoint", None) or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    allow_http = (opts.pop("allow_http", None) or env.get("AWS_ALLOW_HTTP") or "").lower() == "true"
    virtual_hosted = opts.pop("virtual_hosted_style_request", None)
    config: dict[str, Any] = dict(opts)
    for key, names in _ENV_KEYS.items():
        value = next((env[n] for n in names if env.get(n)), None)
        if value and key not in config:
            config[key] = value
    if endpoint:
        config["endpoint"] = endpoint
    if virtual_hosted is not None or endpoint:  # a custom endpoint: path style unless told otherwise
        config["virtual_hosted_style_request"] = (virtual_hosted or "false").lower() == "true"
    config.setdefault("region", env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")
    client: dict[str, Any] = {"timeout": "30s", "connect_timeout": "5s"}
    if allow_http or (endpoint or "").startswith("http://"):
        client["allow_http"] = True
    return {"config": config, "client": client}


# Credentials object_store would find in the environment itself, resolved here so that they
# travel with ``worker_access`` to executors whose environment lacks them.
_ENV_KEYS = {
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
}


def _build(bucket: str, resolved: Mapping[str, Any]) -> Any:
    from obstore.store import S3Store

    # Bounded retries: a commit whose outcome stays unknown is decided by reading the log,
    # not by minutes of hidden retries (object_store's default is 10 retries over 3 minutes).
    retry: Any = {"max_retries": 3, "retry_timeout": datetime.timedelta(seconds=20)}
    config: Any = dict(resolved["config"])
    client: Any = dict(resolved["client"])
    return S3Store(bucket, config=config, client_options=client, retry_config=retry)


def worker_access() -> dict[str, Any]:
    """This process's resolved S3 settings, to ship to Spark executors (``use_access`` there).

    Executors are other processes, often on other machines, without the driver's
    ``configure(...)`` calls or environment: the driver's view of the store travels with the
    job (as Spark ships its Hadoop configuration), so both sides reach the same objects.
    """
    with _lock:
        return _resolved_config()


_worker_stores: dict[tuple[str, str], Any] = {}


def store_with(bucket: str, access: Mapping[str, Any] | None) -> Any:
    """The store of ``bucket``: built from shipped ``access`` (``worker_access``), or this process's own."""
    if access is None:
        return _store(bucket)
    import json

    key = (bucket, json.dumps(access, sort_keys=True, default=str))
    with _lock:
        store = _worker_stores.get(key)
        if store is None:
            store = _worker_stores[key] = _build(bucket, access)
        return store


def _failed(request: str, path: str, error: BaseException) -> OSError:
    """An S3 request's failure as an ``OSError`` naming the request, the path and the cause."""
    return OSError(_errno_of(error), f"S3 {request} failed: {error}", path)


def _errno_of(error: BaseException) -> int:
    text = str(error)
    if "403" in text or "Forbidden" in text or "AccessDenied" in text or "401" in text:
        return errno.EACCES
    if "NoSuchBucket" in text:
        return errno.ENOENT
    return errno.EIO


class S3LogStore(LogStore):
    """The log store of tables at ``s3://`` / ``s3a://`` URIs (see module docstring).

    The ``*_object`` methods are the bare S3 requests; the ``LogStore`` methods add the commit
    protocol of the URI's scheme (``dynamodb_commits``). ``fault_hook(step, path)``: for fault
    injection in the DynamoDB protocol (``s3_dynamodb.DynamoDBCommits.commit``).
    """

    fault_hook: s3_dynamodb.FaultHook | None = None

    def _locate(self, path: str) -> tuple[Any, str]:
        bucket, key = split_s3_uri(path)
        return _store(bucket), key

    # -- the bare requests -------------------------------------------------------------------------

    def get_object(self, path: str) -> bytes:
        """GET ``path``; ``FileNotFoundError`` when absent."""
        return self.get_object_timed(path)[0]

    def get_object_timed(self, path: str) -> tuple[bytes, int]:
        """The object's bytes and its time (ms), from one GET (no HEAD)."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            result = obstore.get(store, key)
            stamp = result.meta.get("last_modified")
            data = bytes(result.bytes())
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(errno.ENOENT, "No such object", path) from None
        except Exception as e:  # noqa: BLE001 - obstore raises its own classes for I/O
            raise _failed("GET", path, e) from e
        return data, int(stamp.timestamp() * 1000) if stamp is not None else 0

    def head_object(self, path: str) -> FileStatus | None:
        """HEAD ``path``: its name, size and time, or None when absent."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            meta = obstore.head(store, key)
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as e:  # noqa: BLE001
            raise _failed("HEAD", path, e) from e
        stamp = meta.get("last_modified")
        ms = int(stamp.timestamp() * 1000) if stamp is not None else 0
        return FileStatus(path.rsplit("/", 1)[-1], int(meta["size"]), ms)

    def create_object(self, path: str, data: bytes) -> None:
        """One conditional PUT (``If-None-Match: *``), classified as ``put_if_absent`` promises."""
        import obstore
        from obstore.exceptions import (
            AlreadyExistsError,
            PermissionDeniedError,
            PreconditionError,
            UnauthenticatedError,
        )

        store, key = self._locate(path)
        try:
            obstore.put(store, key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            raise FileAlreadyExistsError(f"{path} already exists") from None
        except (PermissionDeniedError, UnauthenticatedError) as e:
            raise WriteNotDoneError(OSError(errno.EACCES, str(e)), path, "PUT the commit (refused)") from e
        except Exception as e:  # noqa: BLE001
            text = str(e)
            if "409" in text or "ConditionalRequestConflict" in text:
                raise WriteNotDoneError(OSError(errno.EAGAIN, text), path, "PUT the commit (409 conflict)") from e
            if any(s in text for s in ("400 Bad Request", "NoSuchBucket", "InvalidAccessKeyId", "403")):
                raise WriteNotDoneError(OSError(_errno_of(e), text), path, "PUT the commit (refused)") from e
            raise WriteOutcomeUnknownError(OSError(errno.EIO, text), path, "PUT the commit") from e

    def put_object(self, path: str, data: bytes) -> None:
        """A plain PUT: creates or replaces ``path`` atomically."""
        import obstore

        store, key = self._locate(path)
        try:
            obstore.put(store, key, data, mode="overwrite", use_multipart=len(data) > 64 << 20)
        except Exception as e:  # noqa: BLE001
            raise _failed("PUT", path, e) from e

    def delete_object(self, path: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            obstore.delete(store, key)
        except (NotFoundError, FileNotFoundError):
            return
        except Exception as e:  # noqa: BLE001
            raise _failed("DELETE", path, e) from e

    def list_objects(self, directory: str, start_name: str = "") -> list[FileStatus]:
        """The objects directly in ``directory`` named ``start_name`` or after, sorted."""
        import obstore

        store, key = self._locate(directory)
        prefix = key.rstrip("/") + "/" if key else ""
        try:
            # ``offset`` lists the keys after it: start just before ``start_name`` (earlier names are dropped below).
            kwargs: dict[str, Any] = {}
            if start_name and ord(start_name[-1]) > 0:
                kwargs["offset"] = prefix + start_name[:-1] + chr(ord(start_name[-1]) - 1)
            out: list[FileStatus] = []
            for batch in obstore.list(store, prefix, **kwargs):
                for meta in batch:
                    name = str(meta["path"])[len(prefix):]
                    if "/" in name or name < start_name:
                        continue  # deeper keys (_delta_log/_commits/...) are not this directory's files
                    stamp = meta.get("last_modified")
                    ms = int(stamp.timestamp() * 1000) if stamp is not None else 0
                    out.append(FileStatus(name, int(meta["size"]), ms))
        except Exception as e:  # noqa: BLE001
            raise _failed("LIST", directory, e) from e
        out.sort()
        return out

    # -- the log store -----------------------------------------------------------------------------

    def _settled(self, path: str) -> bool:
        """After ``path`` was not found: whether the DynamoDB protocol had it committed, and completed it now."""
        if s3_dynamodb.split_commit_path(path) is None:
            return False
        commits = dynamodb_commits(path)
        return commits is not None and commits.settle(self, path)

    def read(self, path: str) -> bytes:
        return self.read_timed(path)[0]

    def read_timed(self, path: str) -> tuple[bytes, int]:
        """The object's bytes and its time (ms), from one GET (no HEAD)."""
        try:
            return self.get_object_timed(path)
        except FileNotFoundError:
            if not self._settled(path):
                raise
        return self.get_object_timed(path)

    def list_from(self, directory: str, start_name: str = "") -> list[FileStatus]:
        if directory.rstrip("/").endswith("/_delta_log"):
            commits = dynamodb_commits(directory)
            if commits is not None:  # the newest commit complete before listing (delta-spark's listFrom)
                commits.settle_latest(self, directory)
        return self.list_objects(directory, start_name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        split = s3_dynamodb.split_commit_path(path)
        if split is None:
            self.create_object(path, data)
            return
        commits = dynamodb_commits(path)
        if commits is not None:
            commits.commit(self, path, data, self.fault_hook)
            return
        self._refuse_dynamodb_traces(split[0], split[1], again=False)
        try:
            self.create_object(path, data)
        except FileAlreadyExistsError:
            try:
                self._refuse_dynamodb_traces(split[0], split[1], again=True)  # was the winner one of them?
            except WriteNotDoneError:
                pass  # not known now; the version is lost all the same
            raise

    def _refuse_dynamodb_traces(self, table_uri: str, name: str, *, again: bool) -> None:
        """A conditional-PUT commit to a table whose log has DynamoDB-protocol temp files: refused.

        Those writers cannot see a conditional PUT: one of them could copy its commit over a
        version this writer won (delta-spark's copy does not fail then, its commit is lost).
        Looked for once per ``TRACE_CHECK_INTERVAL_S`` per table, and ``again`` after a lost race.
        """
        now = time.monotonic()
        with _lock:
            last = _traces_checked.get(table_uri)
        if not again and last is not None and now - last < TRACE_CHECK_INTERVAL_S:
            return
        import obstore

        temp_dir = f"{table_uri}/_delta_log/{s3_dynamodb.TEMP_DIR}"
        store, key = self._locate(temp_dir)
        try:
            first = next(iter(obstore.list(store, key, chunk_size=1)), [])
        except Exception as e:  # noqa: BLE001
            raise WriteNotDoneError(_failed("LIST", temp_dir, e), f"{table_uri}/_delta_log/{name}",
                                    "look for DynamoDB-protocol writers") from e  # fmt: skip
        if not first:
            with _lock:
                _traces_checked[table_uri] = now
            return
        scheme = table_uri.split("://", 1)[0]
        version = int(name[:-5])
        raise CommitProtocolMismatchError(
            f"Table {table_uri}: its log has traces of Delta's DynamoDB commit protocol ({temp_dir}/"
            f"{str(first[0]['path']).rsplit('/', 1)[-1]}): a writer uses {s3_dynamodb.DYNAMODB_LOG_STORE} "
            "(delta-spark's multi-cluster S3 log store, or serialake configured for it). This writer commits "
            f"by S3 conditional PUT, which such writers cannot see: committing version {version} could lose one "
            "of their commits, so nothing was committed.\n"
            f"Help: configure this writer for the DynamoDB protocol with the other writers' DynamoDB table and "
            f"region (spark.delta.logStore.{scheme}.impl={s3_dynamodb.DYNAMODB_LOG_STORE}, "
            f"spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName / .ddb.region; without Spark: "
            f"serialake.storage.s3.configure(...) with those keys, or {s3_dynamodb.ENV_LOCKING_PROVIDER}=dynamodb). "
            f"If no writer uses DynamoDB for this table any more, delete {temp_dir}/ and retry.",
            table=table_uri, version=version, combination="s3 conditional put + dynamodb",
        )  # fmt: skip

    def write(self, path: str, data: bytes) -> None:
        self.put_object(path, data)

    def exists(self, path: str) -> bool:
        return self.status(path) is not None

    def status(self, path: str) -> FileStatus | None:
        found = self.head_object(path)
        if found is None and self._settled(path):
            found = self.head_object(path)
        return found

    def modification_time(self, path: str) -> int:
        import obstore

        store, key = self._locate(path)
        try:
            stamp = obstore.head(store, key).get("last_modified")
        except Exception:  # noqa: BLE001 - unknown: the caller falls back
            return 0
        return int(stamp.timestamp() * 1000) if stamp is not None else 0

    def delete(self, path: str) -> None:
        self.delete_object(path)
