"""test_subquery_dml over Connect (#43)."""

from __future__ import annotations

import pytest

from tests.sql.test_subquery_dml import *  # noqa: F403

pytestmark = [pytest.mark.spark, pytest.mark.connect]
