"""A test's peer, tool or host feature missing: under CI (CI=true, where scripts/test-all provides every one) the test
fails; elsewhere it is skipped, with the same message."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":  # CI: a missing peer is a failure, never a skip
        pytest.fail(message)
    pytest.skip(message)  # outside CI only
