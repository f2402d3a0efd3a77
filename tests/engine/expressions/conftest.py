"""Keep the tests of one expensive module-scoped fixture on one xdist worker."""

from __future__ import annotations

import pytest

from tests.conftest import _join_xdist_group

# Module fixtures whose set-up is most of their module's time. xdist hands the tests of a
# module out one by one (`--dist loadgroup`), so without a group each worker that receives
# one of them runs the fixture again: the 10,000-term filter probe ran twice in CI.
ONE_WORKER_FIXTURES = ("long_filter_outcomes",)


def pytest_itemcollected(item: pytest.Item) -> None:
    for fixture in ONE_WORKER_FIXTURES:
        if fixture in getattr(item, "fixturenames", ()):
            _join_xdist_group(item, fixture)
            return
