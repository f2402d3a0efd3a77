"""A real browser against a real Airflow UI, for the tests of what a person sees.

Reusable by any test module: the fixtures ``api_server``, ``browser`` and ``airflow_page`` are
in tests/conftest.py, or use the classes directly. The session has one api-server (per xdist
worker), shared by every browser module: its settings (``api_server_env``) are the union of what
those modules need, and each module makes its own connections and data through it.

- :class:`ApiServer`: ``airflow api-server`` on 127.0.0.1 (a free port) with its own
  temporary ``AIRFLOW_HOME`` and SQLite database, the simple auth manager with one admin
  user whose password the test knows, connections and settings from ``env_vars``. It is
  stopped (its whole process group) when the fixture ends. :meth:`ApiServer.api` calls its
  REST API as the admin (a connection made there is the one the UI lists), in milliseconds
  where an ``airflow`` CLI process takes seconds.
- :func:`launch_chromium`: Debian's ``/usr/bin/chromium`` driven by Playwright (the
  ``playwright`` Python package; its own browser downloads are never used).
- :class:`AirflowPage`: a logged-in page with ``screenshot(name)``; every screenshot is
  kept as a test artifact (:func:`screenshot_dir`: ``$DELTA_TEST_ARTIFACTS/screenshots/...``,
  which ``make test`` sets, else the test's pytest tmp dir), the path printed.

What costs seconds is done once: the metadata database is migrated once per session and
copied into the server's home (``migrated_airflow_db``); the api-server starts once per session
(about 15 s of CPU: Airflow's imports, its FastAPI apps, the providers and plugins); a person
logs in through the login form once per module (``login_state``); each test's page is a fresh
browser context that starts from that login's cookies and storage.

``make test`` installs Chromium with apt-get when it is missing and it runs as root; the
fixtures fail with what to install otherwise.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from scripts.airflow_cli import AIRFLOW, AirflowCli, output_tail

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
# Headless, and nothing that reaches beyond loopback (updates, sync, first-run pages).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-browser-test"
SERVER_START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiServer:
    """``airflow api-server`` of an isolated Airflow (``airflow``), listening on ``base_url``."""

    airflow: AirflowCli
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    username: str = ADMIN_USER
    password: str = ADMIN_PASSWORD
    _token: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def prepare(
        cls,
        home: Path,
        env_vars: Mapping[str, str] | None = None,
        dags_folder: Path | None = None,
        migrated_db: Path | None = None,
    ) -> ApiServer:
        """An Airflow home under ``home``, migrated, with the simple auth manager's admin and its known password.

        ``migrated_db``: a metadata database that ``airflow db migrate`` made already
        (:func:`migrated_airflow_db`), copied instead of migrating again.
        """
        home.mkdir(parents=True, exist_ok=True)
        passwords = home / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps({ADMIN_USER: ADMIN_PASSWORD}), encoding="utf-8")
        port = free_port()
        settings = {
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",  # the connection form's Test button
            **dict(env_vars or {}),
        }
        kwargs: dict[str, Any] = {"env_vars": settings}
        if dags_folder is not None:
            kwargs["dags_folder"] = dags_folder
        airflow = AirflowCli(home, **kwargs)
        if migrated_db is None:
            airflow.migrate()
        else:
            shutil.copyfile(migrated_db, home / "airflow.db")
        return cls(airflow=airflow, port=port, log_path=home / "api-server.log")

    def start(self) -> None:
        """Start the server and wait until its health endpoint answers (its log is in the error otherwise)."""
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(AIRFLOW), "api-server",
                 "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                env=self.airflow.env(), cwd=self.airflow.home, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.process = process
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"airflow api-server exited with {process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, http.client.HTTPException):
                pass  # not listening yet (or a half-started server's answer)
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"airflow api-server did not answer within {SERVER_START_TIMEOUT:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server's whole process group (the api-server and its uvicorn worker).

        A few seconds' grace only: uvicorn's graceful shutdown waits for open connections
        (a browser's keep-alive ones), and nothing of a test server's home outlives the test.
        """
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def token(self) -> str:
        """The admin's JWT from the simple auth manager's token endpoint (what the login form gets too)."""
        if self._token is None:
            body = json.dumps({"username": self.username, "password": self.password}).encode()
            request = urllib.request.Request(
                f"{self.base_url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                self._token = str(json.loads(response.read())["access_token"])
        return self._token

    def api(self, method: str, path: str, body: object = None) -> Any:
        """``METHOD /api/v2/PATH`` as the admin; the JSON answer (an HTTP error raises, with the server's answer)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base_url}/api/v2/{path.lstrip('/')}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=180) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} {path} answered {error.code}: {error.read()[-2000:]!r}") from error
        return json.loads(text) if text else None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` against the same home and database (connections, variables...), checked."""
        result = self.airflow.run(*args)
        if result.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{output_tail(result)}")
        return result


def chromium_missing_reason() -> str | None:
    """Why Chromium or Playwright cannot run here, or None."""
    if not CHROMIUM.exists():
        return (
            f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install chromium`, which `make test` "
            "does when run as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is missing: `make .venv/.installed-stamp` installs requirements.lock"
    return None


def launch_chromium(playwright: Any) -> Browser:
    """Debian's Chromium, headless, through Playwright (never Playwright's own browser builds)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


@dataclass
class AirflowPage:
    """A Playwright page logged in to ``server``; screenshots go under ``screenshot_dir``."""

    page: Page
    server: ApiServer
    screenshot_dir: Path
    screenshots: list[Path] = field(default_factory=list)

    def goto(self, path: str) -> None:
        self.page.goto(f"{self.server.base_url}{path}")

    def login(self) -> None:
        """Log in through the simple auth manager's own login form, as a person does."""
        self.goto("/")
        self.page.get_by_label("Username").fill(self.server.username)
        self.page.get_by_label("Password").fill(self.server.password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)

    def screenshot(self, name: str) -> Path:
        """A full-page screenshot kept as a test artifact; its path is printed for the test report."""
        self.screenshot_dir.mkdir(parents=True, exist_ok=True)
        path = self.screenshot_dir / f"{len(self.screenshots):02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.screenshots.append(path)
        print(f"screenshot: {path}")
        return path


# ----------------------------------------------------------------------------- fixtures
# tests/conftest.py imports them for every module. A module must not import `api_server` itself
# (nor a fixture that asks for it): pytest would give that module a server of its own.

MAINTENANCE_HISTORY_SETTING = "AIRFLOW__DELTA__MAINTENANCE_HISTORY_URI"


@pytest.fixture(scope="session")
def api_server_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Extra environment of the session's api-server: what each browser module needs.

    - tests/hooks/test_delta_connection_form.py: a ``spark_local`` connection for the delta
      connections it makes (the hook's checks look it up);
    - tests/plugins/test_delta_tables.py: ``[delta] maintenance_history_uri``, a path where
      that module writes its history (the plugin reads the setting and the history at every
      request, so the table need not exist when the server starts).
    """
    return {
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        MAINTENANCE_HISTORY_SETTING: str(tmp_path_factory.mktemp("airflow_ui_lake") / "maintenance_history"),
    }


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A metadata database after ``airflow db migrate``: the session's one migration
    (:func:`tests.airflow_layer.migrated_database`), which every api-server's home copies."""
    from tests.airflow_layer import migrated_database

    return migrated_database(tmp_path_factory)


@pytest.fixture(scope="session")
def api_server(
    tmp_path_factory: pytest.TempPathFactory, api_server_env: dict[str, str], migrated_airflow_db: Path
) -> Iterator[ApiServer]:
    """One ``airflow api-server`` per test session (per xdist worker), stopped at the session's end."""
    reason = chromium_missing_reason()
    if reason is not None:
        pytest.fail(reason)
    server = ApiServer.prepare(tmp_path_factory.mktemp("airflow_ui_home"), api_server_env, migrated_db=migrated_airflow_db)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium for the module (one browser; each test gets a fresh context)."""
    reason = chromium_missing_reason()
    if reason is not None:
        pytest.fail(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


def screenshot_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where a test's screenshots go: ``$DELTA_TEST_ARTIFACTS/screenshots/<module>/<test>/`` when
    that variable is set (``make test`` sets it to ``.cache/test-artifacts``, kept after the run),
    else ``<tmp_path>/screenshots`` (pytest keeps its last three temporary directories)."""
    artifacts = os.environ.get("DELTA_TEST_ARTIFACTS")
    if not artifacts:
        return tmp_path / "screenshots"
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    return Path(artifacts).resolve() / "screenshots" / module / re.sub(r"[^\w.-]+", "_", request.node.name)


@pytest.fixture(scope="module")
def login_state(browser: Browser, api_server: ApiServer) -> Any:
    """The browser's cookies and local storage after a person logs in through Airflow's login form, once per module."""
    context = browser.new_context()
    context.set_default_timeout(30_000)
    try:
        AirflowPage(context.new_page(), api_server, Path("unused")).login()
        return context.storage_state()
    finally:
        context.close()


@pytest.fixture
def airflow_page(
    browser: Browser, api_server: ApiServer, login_state: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[AirflowPage]:
    """A fresh browser context, logged in to the module's api-server (the module's login); screenshots under
    :func:`screenshot_dir`."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, storage_state=login_state)
    context.set_default_timeout(30_000)
    page = AirflowPage(context.new_page(), api_server, screenshot_dir(request, tmp_path))
    try:
        yield page
    finally:
        context.close()
