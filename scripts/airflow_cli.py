"""An isolated Airflow driven through its CLI, as a user drives it: the demo's and the DAG tests'.

Every instance has its own ``AIRFLOW_HOME`` and SQLite database, no example DAGs, no
``AIRFLOW*`` variable of the calling process, and connections only from the
``AIRFLOW_CONN_*`` variables it is given. DAG files import ``airflow_delta`` from this
checkout (``PYTHONPATH``), whatever the venv installed. What a run did is read from the
metadata database, since the CLI prints it only as log lines.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DAGS = REPO_ROOT / "dags_examples"
AIRFLOW = Path(sys.executable).parent / "airflow"

# Airflow's own CLI entry point (``airflow.__main__.main``, what the ``airflow`` script runs),
# called once per command line of argv[1] (a JSON list) in this one process; after each, a
# line "argv[2] INDEX STATUS" (argv[2] is a marker no command prints).
_BATCH_PROGRAM = r"""
import json, sys, traceback
from airflow.__main__ import main
command_lines, marker = json.loads(sys.argv[1]), sys.argv[2]
for index, argv in enumerate(command_lines):
    sys.argv = ["airflow", *argv]
    try:
        main()
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    print(f"\n{marker} {index} {status}", flush=True)
"""

# A ``delta_default`` connection that submits to Spark in local mode on two cores.
SPARK_LOCAL_CONNECTIONS: dict[str, str] = {
    "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    "AIRFLOW_CONN_DELTA_DEFAULT": json.dumps(
        {
            "conn_type": "delta",
            "extra": {
                "spark_conn_id": "spark_local",
                "spark_conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
            },
        }
    ),
}


def output_tail(result: subprocess.CompletedProcess[str], lines: int = 60) -> str:
    """The last lines of a CLI call's output, for an assertion message."""
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


@dataclass(frozen=True)
class AirflowCli:
    """The ``airflow`` command of an isolated Airflow under ``home``.

    ``env_vars`` are added to the environment (connections, settings a DAG file reads);
    ``logging_level`` is Airflow's (``INFO`` puts the task logs in the output).
    """

    home: Path
    dags_folder: Path = EXAMPLE_DAGS
    env_vars: Mapping[str, str] = field(default_factory=dict)
    logging_level: str = "WARNING"
    timeout: float = 300

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags_folder),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.home / 'airflow.db'}",
            AIRFLOW__LOGGING__LOGGING_LEVEL=self.logging_level,
            # No bytecode beside the DAG files of the checkout.
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        )
        env.update(self.env_vars)
        return env

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS``, waited for; its output captured."""
        return subprocess.run(
            [str(AIRFLOW), *args],
            env=self.env(),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )

    def start(self, *args: str, output: IO[bytes]) -> subprocess.Popen[bytes]:
        """``airflow ARGS`` in the background, its output into ``output``; the caller waits for it."""
        return subprocess.Popen(
            [str(AIRFLOW), *args], env=self.env(), cwd=self.home, stdout=output, stderr=subprocess.STDOUT
        )

    def migrate(self) -> None:
        """``airflow db migrate``: the metadata database every other command needs."""
        self.home.mkdir(parents=True, exist_ok=True)
        result = self.run("db", "migrate")
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{output_tail(result)}")

    def test_dag(self, dag_id: str, conf: Mapping[str, Any]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        """``airflow dags test DAG --conf CONF``; its output and the run it made (see :meth:`latest_run`)."""
        result = self.run("dags", "test", dag_id, "--conf", json.dumps(conf))
        run = self.latest_run(dag_id)
        if run["conf"] != conf:
            raise AssertionError(f"the newest run of {dag_id} is not the one just started:\n{output_tail(result)}")
        return result, run

    def run_many(self, command_lines: Sequence[Sequence[str]]) -> list[subprocess.CompletedProcess[str]]:
        """``airflow ARGS`` for each command line in turn, in one Python process; each one's exit status and output.

        Each command goes through Airflow's CLI entry point as the ``airflow`` script calls
        it, so the first is exactly a fresh ``airflow`` command; the later ones skip what a
        process pays once: the interpreter, Airflow's imports and, for ``dags test``, the
        in-process Execution API (its Cadwyn routes are built at the first request, about
        half of a short ``dags test``'s CPU). Their output is split at marker lines; stderr
        is merged into stdout, in order.
        """
        marker = f"airflow-cli-run-many-{uuid.uuid4().hex}"
        lines = [list(args) for args in command_lines]
        args = [sys.executable, "-c", _BATCH_PROGRAM, json.dumps(lines), marker]
        process = subprocess.run(
            args,
            env={**self.env(), "PYTHONUNBUFFERED": "1"},  # one pipe for both streams, in the order written
            cwd=self.home,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=self.timeout * len(lines),
            check=False,
        )
        results, output = [], process.stdout
        for index, command in enumerate(lines):
            found = re.search(rf"^{marker} {index} (-?\d+)$", output, flags=re.MULTILINE)
            if found is None:  # the process died in this command
                results.append(subprocess.CompletedProcess(["airflow", *command], process.returncode or 1, output, ""))
                output = ""
                continue
            status = int(found[1])
            results.append(subprocess.CompletedProcess(["airflow", *command], status, output[: found.start()], ""))
            output = output[found.end() :]
        return results

    def test_dags(
        self, runs: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[tuple[subprocess.CompletedProcess[str], dict[str, Any]]]:
        """``airflow dags test DAG --conf CONF`` for each ``(DAG, CONF)`` in turn, in one process (:meth:`run_many`);
        each one's output and the run it made (see :meth:`latest_run`)."""
        first_new = self._next_run_id()
        results = self.run_many([("dags", "test", dag_id, "--conf", json.dumps(conf)) for dag_id, conf in runs])
        with sqlite3.connect(self.home / "airflow.db") as db:
            made = db.execute("SELECT id, dag_id FROM dag_run WHERE id >= ? ORDER BY id", (first_new,)).fetchall()
        if [dag_id for _, dag_id in made] != [dag_id for dag_id, _ in runs]:
            tails = "\n".join(output_tail(result) for result in results)
            raise AssertionError(f"expected one new run per command of {[d for d, _ in runs]}, found {made}:\n{tails}")
        outcomes = []
        for (row_id, _), (dag_id, conf), result in zip(made, runs, results, strict=True):
            run = self._run_details(dag_id, row_id)
            if run["conf"] != conf:
                raise AssertionError(f"the run of {dag_id} has conf {run['conf']}, not {conf}:\n{output_tail(result)}")
            outcomes.append((result, run))
        return outcomes

    def _next_run_id(self) -> int:
        with sqlite3.connect(self.home / "airflow.db") as db:
            (last,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM dag_run").fetchone()
        return int(last) + 1

    def task_states(self, dag_id: str) -> dict[str, str]:
        """Task states of the DAG's runs so far, read while a run goes on ({} while the CLI holds the database)."""
        try:
            with sqlite3.connect(self.home / "airflow.db", timeout=1) as db:
                return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)))
        except sqlite3.OperationalError:
            return {}

    def latest_run(self, dag_id: str) -> dict[str, Any]:
        """The DAG's newest run: state, conf, and per task its state, end date, duration (seconds, as
        Airflow records it: the task instance's start to end), tries, reschedules and XCom."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            (row_id,) = db.execute("SELECT MAX(id) FROM dag_run WHERE dag_id = ?", (dag_id,)).fetchone()
        return self._run_details(dag_id, row_id)

    def _run_details(self, dag_id: str, row_id: int) -> dict[str, Any]:
        """The run of ``dag_id`` stored in row ``row_id`` of ``dag_run``, as :meth:`latest_run` describes it."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            run_id, state, conf = db.execute(
                "SELECT run_id, state, conf FROM dag_run WHERE id = ? AND dag_id = ?", (row_id, dag_id)
            ).fetchone()
            rows = db.execute(
                "SELECT task_id, state, end_date, try_number, duration FROM task_instance WHERE dag_id = ? AND run_id = ?",
                (dag_id, run_id),
            ).fetchall()
            # The JSON column gives numbers back as numbers, anything else as its JSON text.
            xcoms = {
                task_id: json.loads(value) if isinstance(value, str | bytes) else value
                for task_id, value in db.execute(
                    "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                    (dag_id, run_id),
                )
            }
            reschedules = dict(
                db.execute(
                    "SELECT ti.task_id, COUNT(*) FROM task_reschedule r JOIN task_instance ti ON r.ti_id = ti.id "
                    "WHERE ti.dag_id = ? AND ti.run_id = ? GROUP BY ti.task_id",
                    (dag_id, run_id),
                )
            )
        return {
            "run_id": run_id,
            "state": state,
            "conf": json.loads(conf) if isinstance(conf, str | bytes) else conf,
            "tasks": {task_id: task_state for task_id, task_state, *_ in rows},
            "end_dates": {task_id: end_date for task_id, _, end_date, *_ in rows},
            "tries": {task_id: tries for task_id, _, _, tries, _ in rows},
            "durations": {task_id: duration for task_id, *_, duration in rows},
            "xcoms": xcoms,
            "reschedules": reschedules,
        }
