"""test_write_options over Connect (#43)."""

from __future__ import annotations

import pytest

from tests.sql.test_write_options import *  # noqa: F403

pytestmark = [pytest.mark.spark, pytest.mark.connect]
