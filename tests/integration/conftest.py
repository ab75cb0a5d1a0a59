"""Fixtures of the integration suite."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["memory", "s3"])
def target(request) -> tuple[str, dict[str, str] | None]:
    """A fresh table URI and its storage options: in process memory, and on the moto stack."""
    if request.param == "memory":
        return request.getfixturevalue("memory_uri"), None
    return request.getfixturevalue("s3_uri"), request.getfixturevalue("storage_options")
