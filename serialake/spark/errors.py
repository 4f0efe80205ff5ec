"""serialake's errors as PySpark's too, at the Spark-facing entry points.

delta-spark code catches PySpark's classes: ``AnalysisException`` for a table that already
exists or is missing, a bad column or condition; ``IllegalArgumentException`` for a bad
argument; ``UnsupportedOperationException`` for what is not supported. serialake raises
its own classes (``serialake.exceptions``: the core never imports pyspark), so an error
leaving a Spark-facing entry point (``DeltaTable``, its builders, and the calls a
configured session wraps) is re-raised as an instance of a class deriving from both:
``except DeltaTableNotFoundError`` and ``except AnalysisException`` both catch it, and its
message is unchanged. The conflict exceptions keep their class as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.errors import (
    AnalysisException,
    IllegalArgumentException,
    PySparkException,
    UnsupportedOperationException,
)

from serialake.exceptions import (
    DeltaAnalysisException,
    DeltaIllegalArgumentException,
    ExecutorEnvironmentError,
    UnsupportedFeatureError,
)

__all__ = ["as_pyspark", "executors_lacking", "pyspark_errors", "raising_pyspark", "raising_executor_errors"]

_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound=type)

_PAIRS: tuple[tuple[type[BaseException], type[PySparkException]], ...] = (
    (DeltaAnalysisException, AnalysisException),
    (DeltaIllegalArgumentException, IllegalArgumentException),
    (UnsupportedFeatureError, UnsupportedOperationException),
)


_OURS = tuple(ours for ours, _ in _PAIRS)
_BRIDGED: dict[type[BaseException], type[BaseException]] = {}


def _bridged(cls: type[BaseException], spark_cls: type[PySparkException]) -> type[BaseException]:
    """``cls`` and ``spark_cls`` in one class, named as ``cls``, printing as ``cls`` does (made once)."""
    made = _BRIDGED.get(cls)
    if made is None:
        made = type(cls.__name__, (cls, spark_cls), {"__module__": cls.__module__, "__str__": cls.__str__})
        made = _BRIDGED.setdefault(cls, made)
    return made


def as_pyspark(error: BaseException) -> BaseException:
    """``error`` as an instance of its class and PySpark's matching one (itself when none matches)."""
    for ours, spark_cls in _PAIRS:
        if isinstance(error, ours) and not isinstance(error, PySparkException):
            try:
                bridged = _bridged(type(error), spark_cls)(*error.args)
            except TypeError:  # a subclass whose constructor takes other arguments: leave it as it is
                return error
            bridged.__dict__.update(error.__dict__)
            # PySpark's accessors (getMessage, getCondition...) read these.
            bridged.__dict__.update(_message=str(error), _errorClass=None, _messageParameters=None, _contexts=[])
            bridged.__cause__, bridged.__context__ = error.__cause__, error.__context__
            bridged.__suppress_context__ = error.__suppress_context__
            return bridged
    return error


def raising_pyspark(fn: _F) -> _F:
    """``fn`` whose serialake errors leave as ``as_pyspark`` makes them."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _OURS as e:
            bridged = as_pyspark(e)
            if bridged is e:
                raise
            raise bridged.with_traceback(e.__traceback__) from e.__cause__

    return call  # type: ignore[return-value]


def pyspark_errors(cls: _C) -> _C:
    """Class decorator: every public method (and ``__init__``) raises through ``raising_pyspark``."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, staticmethod):
            setattr(cls, name, staticmethod(raising_pyspark(value.__func__)))
        elif isinstance(value, classmethod):
            setattr(cls, name, classmethod(raising_pyspark(value.__func__)))
        elif callable(value):
            setattr(cls, name, raising_pyspark(value))
    return cls


# Modules serialake's tasks import in the executors' Python (``spark.remote``).
_TASK_MODULES = ("serialake", "pyarrow", "obstore", "numpy")
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_.]+)'")


def executors_lacking(error: BaseException) -> str | None:
    """The module serialake's tasks need that ``error`` (a failed Spark job) says the executors lack."""
    found = _NO_MODULE.search(str(error))
    if found is None:
        return None
    module = found.group(1)
    return module if module.split(".", 1)[0] in _TASK_MODULES else None


def raising_executor_errors(fn: _F) -> _F:
    """``fn`` (runs a Spark job of serialake's tasks) whose failure for a module the executors lack
    leaves as ``ExecutorEnvironmentError``, naming the module and what to do."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            module = executors_lacking(e)
            if module is None:
                raise
            raise ExecutorEnvironmentError(
                f"Spark's executors cannot import {module!r}, which serialake's tasks need (they write and read "
                "data files on object storage in the executors' Python). Install serialake with its dependencies "
                "in the executors' Python, or on a Spark Connect server ship it with the session: "
                "serialake.spark.session.ship_serialake(spark) (spark.addArtifacts of serialake as a zip; "
                "pyarrow and obstore must be installed there)",
                module=module,
            ) from e

    return call  # type: ignore[return-value]
