"""The app of the "Delta tables" page of the Airflow UI: the fleet's health, what to do next, and what was done.

A FastAPI app that the plugin (:mod:`airflow_delta.plugins.delta_tables`) mounts on the
api-server at ``/delta-tables``; only the api-server imports this module. Every route
depends on Airflow's own ``get_user`` (the UI's ``_token`` cookie or an ``Authorization:
Bearer`` token): a mounted app inherits none of the core API's dependencies, so without it
the page and its API would be open to anyone.

Everything comes from the maintenance history (``[delta] maintenance_history_uri`` or the
``delta_default`` connection's ``maintenance_history_uri`` extra; docs/fleet.md): each
table's newest ``HEALTH`` row holds its whole health record, from which the planner's
recommendation is computed (default budget, no reads), and the maintenance rows give the
last runs and the charts over time. A table's own page also reads its recent commits from
its log (``DeltaTable.history``), never its data files.

- ``GET /delta-tables/`` and ``GET /delta-tables/api/fleet``: the fleet (HTML, JSON);
- ``GET /delta-tables/table?uri=...`` and ``GET /delta-tables/api/table?uri=...``: one table.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse

from airflow_delta.engine import (
    DeltaError,
    DeltaTable,
    latest_health,
    plan_maintenance,
    read_history,
)
from airflow_delta.hooks.delta import DEFAULT_CONN_ID, DeltaHook

RECENT_COMMITS = 20


def _history_location() -> tuple[str | None, dict[str, str] | None]:
    hook = DeltaHook(DEFAULT_CONN_ID)
    uri = hook.maintenance_history_uri()
    return uri, (hook.settings.storage_options or None)


def _history() -> tuple[str | None, list[dict[str, Any]]]:
    uri, options = _history_location()
    if uri is None:
        return None, []
    return uri, read_history(uri, options)


def fleet_view() -> dict[str, Any]:
    """The fleet as the page shows it: per table its newest health, recommendation and last maintenance."""
    uri, rows = _history()
    records = latest_health(rows)
    maintenance = [r for r in rows if r["operation"] != "HEALTH"]
    plan = plan_maintenance(records.values(), history=maintenance, now_ms=int(time.time() * 1000))
    advice: dict[str, list[str]] = {}
    for decision in plan.decisions:
        if decision.chosen:
            advice.setdefault(decision.table, []).append(f"{decision.operation}: {decision.reason}")
    last: dict[str, dict[str, Any]] = {}
    for row in maintenance:
        last[row["table_uri"]] = row  # rows are oldest first: the last one wins
    tables = []
    for table, record in sorted(records.items()):
        run = last.get(table)
        tables.append({
            "table": table,
            "health": record.to_dict(),
            "recommendation": advice.get(table, []) if record.ok else [f"{record.status}: {record.reason}"],
            "last_maintenance": None if run is None else {
                k: run[k] for k in ("operation", "status", "recorded_ms", "version", "reason", "duration_ms")
            },
        })
    return {"history_uri": uri, "tables": tables}


def table_view(table: str) -> dict[str, Any]:
    """One table: its newest health, its health over time, its maintenance runs and recent commits."""
    uri, rows = _history()
    mine = [r for r in rows if r["table_uri"] == table]
    if not mine:
        raise HTTPException(status_code=404, detail=f"no history of {table!r}: it is not in the fleet's health records")
    health = latest_health(mine).get(table)
    over_time = [
        {k: r[k] for k in ("recorded_ms", "version", "num_files", "small_files", "files_with_deletion_vectors",
                            "deleted_rows", "tombstones", "vacuumable_bytes", "log_files", "log_size_in_bytes",
                            "commits_since_checkpoint")}
        for r in mine if r["operation"] == "HEALTH" and r["status"] == "ok"
    ]
    runs = [{k: r[k] for k in ("recorded_ms", "operation", "status", "version", "duration_ms", "bytes_rewritten",
                               "bytes_freed", "files_removed", "files_added", "reason", "dag_id", "run_id")}
            for r in mine if r["operation"] != "HEALTH"]
    _, options = _history_location()
    try:
        commits = [
            {"version": c.get("version"), "timestamp": c.get("timestamp"), "operation": c.get("operation"),
             "operationMetrics": c.get("operationMetrics")}
            for c in DeltaTable(table, options).history(limit=RECENT_COMMITS)
        ]
        commits_error = None
    except DeltaError as error:
        commits, commits_error = [], str(error)
    return {
        "table": table, "history_uri": uri, "health": None if health is None else health.to_dict(),
        "over_time": over_time, "maintenance": runs, "commits": commits, "commits_error": commits_error,
    }


# ------------------------------------------------------------------ HTML

_STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4} .bad{color:#b00} .ok{color:#070} .muted{color:#777}
.charts{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0} figcaption{font-size:12px;color:#555}
"""


def _when(ms: int | None) -> str:
    if ms is None:
        return "never seen"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _bytes(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _bars(title: str, labels: Sequence[str], values: Sequence[float], *, test_id: str) -> str:
    """An SVG bar chart (one bar per value), labels under the bars."""
    width, height, pad = 460, 180, 28
    peak = max(values, default=0) or 1
    slot = (width - 2 * pad) / max(len(values), 1)
    parts = [f"<svg data-testid='{test_id}' width='{width}' height='{height + 40}' role='img' "
             f"aria-label='{html.escape(title)}'>",
             f"<line x1='{pad}' y1='{height}' x2='{width - pad}' y2='{height}' stroke='#333'/>"]
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        bar = (height - pad) * value / peak
        x = pad + i * slot + slot * 0.1
        parts.append(f"<rect x='{x:.1f}' y='{height - bar:.1f}' width='{slot * 0.8:.1f}' height='{bar:.1f}' "
                     f"fill='#3b6fb6'><title>{html.escape(label)}: {value:g}</title></rect>")
        parts.append(f"<text x='{x + slot * 0.4:.1f}' y='{height - bar - 3:.1f}' font-size='10' "
                     f"text-anchor='middle'>{value:g}</text>")
        parts.append(f"<text x='{x + slot * 0.4:.1f}' y='{height + 14}' font-size='9' text-anchor='middle'>"
                     f"{html.escape(label)}</text>")
    parts.append("</svg>")
    return f"<figure>{''.join(parts)}<figcaption>{html.escape(title)}</figcaption></figure>"


def _size_label(lower: int, upper: int | None) -> str:
    short = _bytes(lower).replace(".0 ", "").replace(" ", "")
    return f"{short}+" if upper is None else f"{short}-{_bytes(upper).replace('.0 ', '').replace(' ', '')}"


def fleet_html(view: Mapping[str, Any]) -> HTMLResponse:
    if view["history_uri"] is None:
        return _page("Delta tables", "<h1>Delta tables</h1><p class='bad'>No maintenance history is configured: set "
                     "<code>[delta] maintenance_history_uri</code> or the delta_default connection's "
                     "<code>maintenance_history_uri</code> extra, and run the delta_fleet_maintenance DAG.</p>")
    rows = []
    for t in view["tables"]:
        h = t["health"]
        ok = h["status"] == "ok"
        last = t["last_maintenance"]
        last_text = "none recorded" if last is None else (
            f"{html.escape(last['operation'])} {html.escape(last['status'])} at {_when(last['recorded_ms'])}")
        advice = "<br>".join(html.escape(a) for a in t["recommendation"]) or "<span class='ok'>nothing to do</span>"
        link = f"table?uri={quote(t['table'], safe='')}"
        rows.append(
            f"<tr data-table='{html.escape(t['table'])}'><td><a href='{link}'>{html.escape(t['table'])}</a></td>"
            f"<td class='{'ok' if ok else 'bad'}'>{html.escape(h['status'])}</td>"
            f"<td>{h['version'] if h['version'] is not None else ''}</td><td>{h['num_files']}</td>"
            f"<td>{_bytes(h['size_in_bytes'])}</td><td>{h['small_files']}</td>"
            f"<td>{h['files_with_deletion_vectors']} ({h['deleted_rows_ratio']:.0%} rows)</td>"
            f"<td>{h['vacuumable_files']} ({_bytes(h['vacuumable_bytes'])})</td>"
            f"<td>{h['commits_since_checkpoint']}</td><td>{advice}</td><td>{last_text}</td></tr>"
        )
    body = (
        f"<h1>Delta tables</h1><p class='muted'>{len(view['tables'])} table(s); history "
        f"<code>{html.escape(view['history_uri'])}</code></p>"
        "<table data-testid='fleet'><tr><th>table</th><th>status</th><th>version</th><th>files</th><th>size</th>"
        "<th>small files</th><th>deletion vectors</th><th>vacuumable</th><th>commits since checkpoint</th>"
        "<th>recommendation</th><th>last maintenance</th></tr>" + "".join(rows) + "</table>"
    )
    return _page("Delta tables", body)


def table_html(view: Mapping[str, Any]) -> HTMLResponse:
    h = view["health"]
    title = view["table"]
    charts = []
    if h is not None and h["status"] == "ok":
        buckets = h["size_histogram"]
        charts.append(_bars("file sizes (files per bucket)", [_size_label(b[0], b[1]) for b in buckets],
                            [b[2] for b in buckets], test_id="size-histogram"))
    over = view["over_time"]
    stamps = [datetime.fromtimestamp(r["recorded_ms"] / 1000, tz=UTC).strftime("%m-%d %H:%M") for r in over]
    for key, label in (("files_with_deletion_vectors", "files with deletion vectors"), ("tombstones", "tombstones"),
                       ("log_files", "log files"), ("num_files", "live files")):
        charts.append(_bars(f"{label} over time", stamps, [r[key] or 0 for r in over], test_id=f"over-time-{key}"))
    runs = "".join(
        f"<tr><td>{_when(r['recorded_ms'])}</td><td>{html.escape(r['operation'])}</td><td>{html.escape(r['status'])}"
        f"</td><td>{r['version'] if r['version'] is not None else ''}</td><td>{r['duration_ms']} ms</td>"
        f"<td>{_bytes(r['bytes_rewritten'])}</td><td>{_bytes(r['bytes_freed'])}</td>"
        f"<td>{html.escape(r['reason'] or '')}</td></tr>"
        for r in reversed(view["maintenance"])
    )
    commits = "".join(
        f"<tr><td>{c['version']}</td><td>{_when(c['timestamp'])}</td><td>{html.escape(str(c['operation']))}</td></tr>"
        for c in view["commits"]
    )
    summary = "" if h is None else (
        f"<p>status <b>{html.escape(h['status'])}</b>, version {h['version']}, {h['num_files']} files "
        f"({_bytes(h['size_in_bytes'])}), {h['small_files']} small, {h['files_with_deletion_vectors']} with deletion "
        f"vectors, {h['tombstones']} tombstones ({h['vacuumable_files']} vacuumable), "
        f"{h['commits_since_checkpoint']} commits since the last checkpoint; checked {_when(h['checked_ms'])}</p>"
    )
    error = "" if not view["commits_error"] else f"<p class='bad'>{html.escape(view['commits_error'])}</p>"
    body = (
        f"<p><a href='./'>&larr; Delta tables</a></p><h1>{html.escape(title)}</h1>{summary}"
        f"<div class='charts'>{''.join(charts)}</div>"
        "<h2>Maintenance</h2><table data-testid='maintenance'><tr><th>when</th><th>operation</th><th>status</th>"
        "<th>version</th><th>duration</th><th>rewritten</th><th>freed</th><th>reason</th></tr>" + runs + "</table>"
        f"<h2>Recent commits</h2>{error}<table data-testid='commits'><tr><th>version</th><th>time</th>"
        "<th>operation</th></tr>" + commits + "</table>"
    )
    return _page(title, body)


# ------------------------------------------------------------------ the app

app = FastAPI(title="Delta tables", dependencies=[Depends(get_user)])


@app.get("/", response_class=HTMLResponse)
def fleet_page() -> HTMLResponse:
    return fleet_html(fleet_view())


@app.get("/api/fleet")
def fleet_api() -> dict[str, Any]:
    return fleet_view()


@app.get("/table", response_class=HTMLResponse)
def table_page(uri: str = Query(min_length=1)) -> HTMLResponse:
    return table_html(table_view(uri))


@app.get("/api/table")
def table_api(uri: str = Query(min_length=1)) -> dict[str, Any]:
    return table_view(uri)


__all__ = ["app", "fleet_view", "table_view"]
