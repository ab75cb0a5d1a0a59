"""Fixtures of the fault suites: the fault proxy in front of the session's local stack."""

from __future__ import annotations

import pytest

from tests.support.fault_proxy import FaultProxy


@pytest.fixture
def fault_proxy(local_stack):
    """A fault proxy (no faults yet, seed 7) in front of the local stack's moto server, on a free port of
    127.0.0.1, stopped at the end of the test. Its ``storage_options(...)`` point S3 and DynamoDB at it."""
    proxy = FaultProxy(local_stack.endpoint, seed=7).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def proxied_options(fault_proxy, storage_options) -> dict[str, str]:
    """The local stack's storage options with both endpoints going through ``fault_proxy``."""
    return fault_proxy.storage_options(storage_options)


@pytest.fixture
def make_fault_proxy(local_stack):
    """Start proxies with other seeds or several labelled listeners; each is stopped at the end."""
    started: list[FaultProxy] = []

    def make(*, seed: int, labels=("main",), slow_seconds: float = 0.2) -> FaultProxy:
        proxy = FaultProxy(local_stack.endpoint, seed=seed, labels=labels, slow_seconds=slow_seconds).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()
