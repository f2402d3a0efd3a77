"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from tests.delta_lake import DeltaLakeSession
    from tests.object_store_helpers import ObjectStoreServer

# Timing is not behaviour: no per-example deadline (machines here are shared and noisy).
# On CI the examples are derandomised, so a run is reproducible and a landing cannot be
# blocked by an example no developer has seen; locally every run explores new examples.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the modules that hold slow tests first, each module kept whole.

    xdist hands tests out in collection order; a multi-minute test collected last (the pip
    install, a DAG run) would finish alone on one worker while the other sits idle. Started
    first, the long tests overlap with the thousands of short ones. Whole modules move, so a
    module-scoped fixture (an api-server, a cluster) is still set up once per worker.
    """
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow") and item.module}
    items.sort(key=lambda item: (item.module.__name__ if item.module else "") not in slow_modules)


_DEFAULT_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "delta-tables"


def shared_tables_dir() -> Path:
    """The shared Delta tables beside the project (``../shared/delta-tables``).

    Resolved, because delta-rs reports file URIs with symlinks resolved and tests compare
    its URIs with ours.
    """
    return Path(os.environ.get("DELTA_SHARED_TABLES", str(_DEFAULT_SHARED))).resolve()


@pytest.fixture(scope="session")
def shared_tables() -> Path:
    path = shared_tables_dir()
    if not path.is_dir():
        pytest.fail(f"shared Delta tables not found at {path}; set DELTA_SHARED_TABLES")
    return path


@pytest.fixture
def table_path(tmp_path: Path) -> str:
    """A fresh directory for a table a test creates."""
    path = tmp_path / "table"
    path.mkdir()
    return str(path)


# The Spark standalone master and worker of the Airflow layer's tests (tests/hooks,
# tests/operators), started once per session by the first test that asks for it.
from tests.standalone_cluster import standalone_cluster  # noqa: E402, F401

# --------------------------------------------------------------- object-store servers
# moto's S3 server and Azurite, started once per session (per xdist worker) on loopback
# (tests/object_store_helpers.py). A server that cannot start fails its tests with the reason.


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStoreServer]:
    from tests.object_store_helpers import running, start_moto

    with running(start_moto(tmp_path_factory.mktemp("moto"))) as server:
        yield server


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStoreServer]:
    from tests.object_store_helpers import running, start_azurite

    with running(start_azurite(tmp_path_factory.mktemp("azurite"))) as server:
        yield server


@pytest.fixture(params=["s3", "azure"])
def object_store(request: pytest.FixtureRequest) -> ObjectStoreServer:
    """Each object-store server in turn (the test runs once per store)."""
    return request.getfixturevalue(f"{request.param}_server")

# --------------------------------------------------------------- Delta Lake on Spark
# The reference implementation as an oracle: one Spark-with-Delta process per session (per
# xdist worker; `make test` runs every test that uses it on one worker, see the hook below),
# started by the first test that asks for it (tests/delta_lake.py). Missing
# set-up fails the test with how to fix it (`make test` installs it), never skips.


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test that uses Delta Lake runs on one xdist worker (``--dist loadgroup``), and
    every other module's tests run together on one worker.

    The Delta session is per worker: a JVM of 1-1.6 GB that takes 30 s or more to start.
    One group means one JVM for the suite, and the other worker runs everything else.
    A module is a group of its own because xdist hands out ungrouped tests one by one: a
    module whose tests land on both workers sets up its module fixtures (a demo run, a
    standalone Spark cluster, an api-server and a browser) on each.
    (A hook of its own, before xdist's ``pytest_collection_modifyitems`` reads the marker.)
    """
    if "delta_lake" in getattr(item, "fixturenames", ()):
        _join_xdist_group(item, "delta_lake")
    elif item.get_closest_marker("xdist_group") is None:
        _join_xdist_group(item, item.nodeid.split("::", 1)[0])


def _join_xdist_group(item: pytest.Item, group: str) -> None:
    item.add_marker(pytest.mark.xdist_group(group))
    # xdist (3.8) puts a test in its group by renaming it on the worker to `<nodeid>@<group>`
    # through `item._nodeid`; pytest 9 derives the node id from `item._id`, so that rename is
    # lost and loadgroup scatters the group. On an xdist worker with loadgroup, rename here.
    if getattr(item.config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.fixture(scope="session")
def delta_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeltaLakeSession]:
    from tests.delta_lake import DeltaLakeSession, DeltaLakeUnavailableError

    try:
        session = DeltaLakeSession.start(tmp_path_factory.mktemp("delta-lake"))
    except DeltaLakeUnavailableError as exc:
        pytest.fail(str(exc), pytrace=False)
    with session:
        yield session


# --------------------------------------------------------------- the browser tests
# An `airflow api-server` per test module and Debian's Chromium (tests/browser.py): a module
# asks for `airflow_page` (logged in) and may override `api_server_env` for its connections.
from tests.browser import (  # noqa: E402, F401
    airflow_page,
    api_server,
    api_server_env,
    browser,
    login_state,
    migrated_airflow_db,
)
