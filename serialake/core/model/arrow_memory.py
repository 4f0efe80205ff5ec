"""The Arrow memory pool for a table's log state (checkpoint rows, parsed statistics).

pyarrow's default pool on Linux wheels is mimalloc, which keeps much of what a big decode
frees: reading the add rows of a 500,000-file checkpoint (76 MB kept) raised the resident
size by 170 MB with it, 120 MB with jemalloc, 135 MB with the C library's allocator, and
mimalloc gave far less back afterwards. The rows a snapshot keeps are long-lived and
allocated in a few bursts, which suits jemalloc; so the big decodes of the core allocate
from jemalloc where pyarrow has it, else from the system allocator. A process that chose
its pool (``ARROW_DEFAULT_MEMORY_POOL``) keeps its choice. Any pool is correct for any
buffer: each buffer frees into the pool it came from.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import pyarrow as pa

__all__ = ["log_pool", "release_memory"]


@functools.cache
def log_pool() -> pa.MemoryPool:
    """The pool for big, long-lived log state (see the module docstring)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return pa.default_memory_pool()
    try:
        return pa.jemalloc_memory_pool()
    except (NotImplementedError, pa.ArrowException):
        return pa.system_memory_pool()


def release_memory() -> None:
    """Give back to the system what the allocators kept from freed memory.

    Decoding a big checkpoint or parsing every file's stats frees much more than it keeps,
    and the allocators hold on to freed pages unless asked: Arrow's pools, and the C
    library's heap, where NumPy's temporaries of a filter over hundreds of thousands of
    files land once its adaptive threshold sends blocks of a few MB there rather than to
    ``mmap``. A millisecond or two.
    """
    default = pa.default_memory_pool()
    default.release_unused()
    pool = log_pool()
    if pool is not default:
        pool.release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (other C libraries, other systems)."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn
