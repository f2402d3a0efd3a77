"""The "Delta tables" page in a real browser: Debian's headless Chromium (Playwright) against an
``airflow api-server`` on 127.0.0.1 with the provider's plugin (the session's, tests/browser.py), logged in through Airflow's own
login form; screenshots kept under the test's tmp dir. Without login, the page and its API answer 401."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_delta.engine import (
    DeltaTable,
    MaintenanceRecord,
    OptimizeOptions,
    append_history,
    fleet_health,
    resolve_fleet,
)
from scripts.fleet_tables import build_fleet

# The fixtures (api_server, browser, airflow_page) come from tests/conftest.py: imported here,
# pytest would start this module an api-server of its own instead of the session's.
from tests.browser import MAINTENANCE_HISTORY_SETTING, AirflowPage, ApiServer, screenshot_dir

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, api_server: ApiServer) -> dict[str, str]:
    """The demo fleet, two health checks recorded around an OPTIMIZE of sales/orders, in the
    maintenance history the session's api-server reads (its ``[delta] maintenance_history_uri``)."""
    root = tmp_path_factory.mktemp("lake")
    tables = build_fleet(root, small_files=12)
    history = api_server.airflow.env_vars[MAINTENANCE_HISTORY_SETTING]
    uris = resolve_fleet(prefix=str(root))
    append_history(history, [MaintenanceRecord.from_health(r, dag_id="delta_fleet_maintenance")
                             for r in fleet_health(uris)])
    time.sleep(0.05)
    started = time.monotonic()
    result = DeltaTable(tables["sales/orders"]).optimize(OptimizeOptions())
    append_history(history, [MaintenanceRecord(
        tables["sales/orders"], "OPTIMIZE", version=result.version, read_version=result.read_version,
        duration_ms=int((time.monotonic() - started) * 1000), bytes_rewritten=result.metrics["filesRemoved"]["totalSize"],
        files_removed=result.metrics["numFilesRemoved"], files_added=result.metrics["numFilesAdded"],
        reason="12 small files, compaction leaves 3 of 12", dag_id="delta_fleet_maintenance", task_id="optimize",
    )])
    time.sleep(0.05)
    append_history(history, [MaintenanceRecord.from_health(r) for r in fleet_health(uris)])
    return {**tables, "history": history}


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_page_and_its_api_need_a_login(
    api_server: ApiServer, browser: Browser, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    base = api_server.base_url
    for path in ("/delta-tables/", "/delta-tables/api/fleet", "/delta-tables/table?uri=x", "/delta-tables/api/table?uri=x"):
        assert _status(base + path) == 401, path
        assert _status(base + path, {"Authorization": "Bearer not-a-token"}) in (401, 403), path
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"{base}/delta-tables/")
        assert response is not None and response.status == 401
        assert "Not authenticated" in page.content()
        screenshots = screenshot_dir(request, tmp_path)
        screenshots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshots / "not-logged-in.png"))
        assert (screenshots / "not-logged-in.png").stat().st_size > 0
    finally:
        context.close()
    # With Airflow's token, the API answers.
    assert _status(base + "/delta-tables/api/fleet", {"Authorization": f"Bearer {api_server.token()}"}) == 200


def test_the_fleet_page_and_a_table_page(airflow_page: AirflowPage, lake: dict[str, str]) -> None:
    page = airflow_page.page
    # The UI's navigation has the page (an external view in Browse), shown in Airflow's frame.
    airflow_page.goto("/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Delta tables").click()
    page.wait_for_url("**/plugin/delta-tables")
    frame = page.frame_locator("iframe")
    frame.locator("[data-testid=fleet]").wait_for()
    airflow_page.screenshot("fleet-in-airflow-ui")

    airflow_page.goto("/delta-tables/")
    fleet = page.locator("[data-testid=fleet]")
    fleet.wait_for()
    rows = {name: page.locator(f"tr[data-table='{lake[name]}']") for name in
            ("sales/orders", "sales/refunds", "events/clicks", "events/audit", "ref/countries", "broken/orphan")}
    for name, row in rows.items():
        assert row.count() == 1, name
    assert "unreadable" in rows["broken/orphan"].inner_text()
    assert "OPTIMIZE" in rows["sales/refunds"].inner_text() and "purge ratio" in rows["sales/refunds"].inner_text()
    assert "VACUUM" in rows["events/clicks"].inner_text()
    audit = rows["events/audit"].locator("td").all_inner_texts()
    assert audit[8] == "15" and "OPTIMIZE" in audit[9]  # 15 commits: under the default budget's 50 for CHECKPOINT
    assert "nothing to do" in rows["ref/countries"].inner_text()
    orders = rows["sales/orders"].inner_text()
    assert "OPTIMIZE success" in orders  # the last maintenance
    assert "cooling down" not in orders
    airflow_page.screenshot("fleet")

    rows["sales/orders"].locator("a").click()
    page.locator("[data-testid=size-histogram]").wait_for()
    # The size histogram of the newest health: 3 compacted files, all in the smallest bucket.
    assert page.locator("[data-testid=size-histogram] rect").count() == 8
    assert (page.locator("[data-testid=size-histogram] rect title").first.text_content() or "").endswith(": 3")
    # Two health checks over time: the live files went from 12 to 3.
    files_over_time = page.locator("[data-testid=over-time-num_files] rect title")
    assert files_over_time.count() == 2
    assert [t.split(": ")[1] for t in files_over_time.all_text_contents()] == ["12", "3"]
    assert page.locator("[data-testid=over-time-tombstones]").count() == 1
    assert page.locator("[data-testid=over-time-log_files]").count() == 1
    assert page.locator("[data-testid=over-time-files_with_deletion_vectors]").count() == 1
    maintenance = page.locator("[data-testid=maintenance]").inner_text()
    assert "OPTIMIZE" in maintenance and "12 small files" in maintenance
    commits = page.locator("[data-testid=commits] tr")
    assert commits.count() == 1 + 14  # header, then versions 13..0 (create, 12 appends, the OPTIMIZE)
    assert "OPTIMIZE" in commits.nth(1).inner_text()
    airflow_page.screenshot("table-sales-orders")
    assert all(p.exists() for p in airflow_page.screenshots)


def test_the_api_returns_the_same_fleet_as_json(airflow_page: AirflowPage, lake: dict[str, str]) -> None:
    response = airflow_page.page.request.get(f"{airflow_page.server.base_url}/delta-tables/api/fleet")
    assert response.status == 200
    body = response.json()
    assert body["history_uri"] == lake["history"]
    by_table = {t["table"]: t for t in body["tables"]}
    assert by_table[lake["sales/orders"]]["health"]["num_files"] == 3
    assert by_table[lake["broken/orphan"]]["health"]["status"] == "unreadable"
    detail = airflow_page.page.request.get(
        f"{airflow_page.server.base_url}/delta-tables/api/table", params={"uri": lake["sales/refunds"]}).json()
    assert detail["health"]["files_above_purge_ratio"] == 1 and len(detail["over_time"]) == 2
    missing = airflow_page.page.request.get(
        f"{airflow_page.server.base_url}/delta-tables/api/table", params={"uri": "/nowhere"})
    assert missing.status == 404
