"""test_deltatable_compat over Connect (#43)."""

from __future__ import annotations

import pytest

from tests.sql.test_deltatable_compat import *  # noqa: F403

pytestmark = [pytest.mark.spark, pytest.mark.connect]
