"""The provider as Airflow sees it: ``get_provider_info()`` and the real ``airflow providers`` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.provider import get_provider_info

REPO_ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = Path(sys.executable).parent / "airflow"


def _airflow_json(home: Path, *args: str) -> Any:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    result = subprocess.run(
        [str(AIRFLOW), *args, "-o", "json"], env=env, cwd=home, capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout[result.stdout.index("[") :])


def test_provider_info_declares_the_delta_connection_fields_as_the_hook_does() -> None:
    info = get_provider_info()
    (connection,) = info["connection-types"]

    assert connection["connection-type"] == DeltaHook.conn_type == "delta"
    assert connection["hook-class-name"] == f"{DeltaHook.__module__}.{DeltaHook.__qualname__}"
    fields = connection["conn-fields"]
    assert set(fields) == {
        "storage_options", "spark_conn_id", "spark_conf", "deploy_mode", "storage_conn_id", "spark_history_url",
        "test_location", "maintenance_history_uri",
    }
    # JSON objects are objects to the UI (its JSON editor), and no literal null is offered as a deploy mode.
    assert fields["storage_options"]["schema"]["type"] == fields["spark_conf"]["schema"]["type"] == ["object", "null"]
    assert fields["deploy_mode"]["schema"]["enum"] == ["client", "cluster"]
    # The same behaviour, in the provider info's spelling (hidden-fields) and the hook's (hidden_fields).
    assert connection["ui-field-behaviour"] == {
        key.replace("_", "-"): value for key, value in DeltaHook.get_ui_field_behaviour().items()
    }
    assert info["hooks"][0]["python-modules"] == ["airflow_delta.hooks.delta"]
    assert "airflow_delta.operators.dml" in info["operators"][0]["python-modules"]


@pytest.mark.slow
def test_the_airflow_cli_lists_the_provider_and_its_connection_type(tmp_path: Path) -> None:
    providers = _airflow_json(tmp_path, "providers", "list")
    hooks = _airflow_json(tmp_path, "providers", "hooks")

    ours = [p for p in providers if p["package_name"] == "airflow-delta"]
    assert len(ours) == 1 and ours[0]["description"].startswith("Delta Lake DELETE/UPDATE/MERGE")
    delta = [h for h in hooks if h.get("connection_type") == "delta"]
    assert delta == [
        {
            "connection_type": "delta",
            "class": "airflow_delta.hooks.delta.DeltaHook",
            "conn_id_attribute_name": "delta_conn_id",
            "package_name": "airflow-delta",
            "hook_name": "Delta Lake",
        }
    ]


def test_the_repository_carries_the_apache_2_license_the_package_declares() -> None:
    license_text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")

    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text  # the full text, not a notice
    debian_copy = Path("/usr/share/common-licenses/Apache-2.0")
    if debian_copy.exists():
        assert license_text == debian_copy.read_text(encoding="utf-8")
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject


def test_airflow_shows_a_documentation_url_for_the_provider() -> None:
    from airflow.providers_manager import ProvidersManager

    # Airflow takes "documentation-url" from the package metadata's Documentation Project-URL.
    provider = ProvidersManager().providers["airflow-delta"]

    assert provider.data["documentation-url"] == "https://pypi.org/project/airflow-delta/"
