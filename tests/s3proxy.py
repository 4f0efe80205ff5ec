"""The fault proxy in front of the test S3 server (it breaks commit PUTs on purpose).

It lives in the package now (``serialake.verify.s3proxy``: ``serialake verify --s3`` puts
its faulty processes behind it); this module re-exports it for the tests.
"""

from __future__ import annotations

from serialake.verify.s3proxy import FaultProxy, random_plan

__all__ = ["FaultProxy", "random_plan"]
