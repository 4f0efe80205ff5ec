"""Fixtures shared with the core tests (a table made through the core API)."""

from tests.core.conftest import make_table

__all__ = ["make_table"]
