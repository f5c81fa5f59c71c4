"""Hosts made with network namespaces (``scrape_contracts.testing.netns``): they need root and ``ip``. Without
them the tests skip with the reason; with ``CI=true`` they fail instead (.ci/run installs iproute2 and runs
as root)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrape_contracts.testing import netns


def require_netns() -> None:
    reason = netns.unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[netns.Cluster]:
    """Three worker hosts (a, b, c) and a site namespace with four addresses; all gone afterwards."""
    require_netns()
    with netns.cluster(tmp_path / "hosts") as made:
        yield made
    assert netns.leftovers(made.prefix) == []
