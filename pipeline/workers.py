"""Worker processes on this machine for the commands that share work through Optuna's storage
(tune's trials, a study's cells): started, waited for and, on Ctrl-C or SIGTERM, stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import click
import mlflow

REPO = Path(__file__).resolve().parents[1]


def run_worker_processes(module: str, argv: list[str], n: int, index_env: str) -> list[int]:
    """Run ``python -m module *argv`` ``n`` times side by side, worker k with ``index_env=k``;
    their exit codes. Each gets an equal share of the cores (n workers each with every core
    thrash) and this process's tracking store. Ctrl-C or SIGTERM here stops them: their running
    trials end KILLED and are retried later."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}
    env["MLFLOW_TRACKING_URI"] = mlflow.get_tracking_uri()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
    command = [sys.executable, "-m", module, *argv]
    procs = [subprocess.Popen(command, env={**env, index_env: str(k)}) for k in range(n)]
    try:
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    for k, (p, code) in enumerate(zip(procs, codes)):
        if code < 0:
            click.echo(
                f"worker {k} (pid {p.pid}) was killed by signal {-code}; what it left running is retried "
                "once its heartbeat is stale",
                err=True,
            )
        elif code > 0:  # refused or failed: say so here, where its error scrolled by long ago
            click.echo(f"worker {k} (pid {p.pid}) exited with code {code}; its error is above", err=True)
    return codes
