"""The drop-in suite (tests/sql/test_dropin.py) over a Spark Connect client session (issue #43)."""

from __future__ import annotations

import pytest

from tests.sql.test_dropin import *  # noqa: F403 - the same tests, collected here with a Connect ``spark``

pytestmark = [pytest.mark.spark, pytest.mark.connect]
