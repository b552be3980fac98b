#!/usr/bin/env bash
# The many-machine path of `tune` and `study`, for real, on loopback: a PostgreSQL server holds
# the Optuna studies, an MLflow tracking server (PostgreSQL backend, artifacts proxied over HTTP)
# holds the runs, and two processes in separate working directories, as on two machines, share
# both: the first opens the study and its parent run, the second joins with --worker true.
#
#   scripts/distributed_tune.sh [tune options]     e.g. --subset 600 --epochs 2 --n-trials 4
#
# Installs PostgreSQL from Debian's packages if absent (as root), runs a throwaway cluster in a
# temporary directory on 127.0.0.1, checks that every trial is recorded once in Optuna and once
# in MLflow (as a child of the study's parent run) and that both processes ran trials. Then a
# study on the same servers (two seeds, static and dynamic, two budgets) whose joining worker is
# killed with SIGKILL mid-cell: every cell must finish exactly once, the killed cell's run end
# FAILED and its cell train again. Stops both servers and removes the directory (KEEP=1 keeps
# it). Exit status 77: PostgreSQL is absent and could not be installed.
#
# SPEEDUP=1 times one study grid with one worker, then two, on the same servers.
# FAULTS=1 then measures the shared set-up's faults on the same servers and prints what each
# left (docs/entry-points.md, "When things go wrong"): the MLflow server down for 30 s while a
# run trains, and PostgreSQL restarted while two tune workers share a study.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
STUDY=distributed

pg_bin() { find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -1; }
if [ -z "$(pg_bin)" ]; then
    echo "installing PostgreSQL from Debian's packages" >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2; then
        echo "skip: PostgreSQL is not installed and apt-get could not install it" >&2
        exit 77
    fi
fi
BIN=$(pg_bin)
# initdb refuses to run as root: run the server as the postgres user the package created.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d /tmp/gcnn-distributed.XXXXXX)
chmod 755 "$WORK"
mkdir "$WORK/pg" "$WORK/machine-a" "$WORK/machine-b"
[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg"
MLFLOW_PID=""
cleanup() {
    # Only what this script started: the MLflow server's process group and this cluster.
    if [ -n "$MLFLOW_PID" ]; then kill -- -"$MLFLOW_PID" 2>/dev/null || true; fi
    if [ -f "$WORK/pg/postmaster.pid" ]; then as_pg "$BIN/pg_ctl" -D "$WORK/pg" -m fast -w stop >/dev/null || true; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

PG_PORT=$(free_port)
as_pg "$BIN/initdb" -D "$WORK/pg" -U postgres --auth=trust -E UTF8 >/dev/null
as_pg "$BIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg/server.log" -w \
    -o "-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1" start >/dev/null
for db in optuna mlflow; do "$BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres "$db"; done
echo "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT" >&2

MLFLOW_PORT=$(free_port)
setsid "$PY" -m mlflow server --backend-store-uri "postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/mlflow" \
    --artifacts-destination "$WORK/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
    >"$WORK/mlflow-server.log" 2>&1 &
MLFLOW_PID=$!
export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
MLFLOW_PID=$MLFLOW_PID "$PY" - <<'EOF' || { tail -20 "$WORK/mlflow-server.log" >&2; exit 1; }
import os, time, urllib.request
deadline = time.time() + 180
while True:
    try:
        urllib.request.urlopen(os.environ["MLFLOW_TRACKING_URI"] + "/health", timeout=5)
        break
    except OSError:
        try:
            os.kill(int(os.environ["MLFLOW_PID"]), 0)
        except ProcessLookupError:
            raise SystemExit("the MLflow server stopped; its log follows") from None
        if time.time() > deadline:
            raise SystemExit("the MLflow server did not answer within 180 s")
        time.sleep(1)
EOF
echo "MLflow server on $MLFLOW_TRACKING_URI" >&2

export OPTUNA_STORAGE="postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/optuna"
export PYTHONPATH="$REPO"
tune() { "$PY" -m pipeline.tune --storage "$OPTUNA_STORAGE" --study-name "$STUDY" "$@"; }
(cd "$WORK/machine-a" && tune "$@" >"$WORK/machine-a.log" 2>&1) &
A=$!
(cd "$WORK/machine-b" && tune --worker true "$@" >"$WORK/machine-b.log" 2>&1) &
B=$!
status=0
wait $A || status=$?
wait $B || status=$((status + $?))
for m in a b; do sed "s/^/[machine-$m] /" "$WORK/machine-$m.log" | grep -v "INFO mlflow" >&2; done
[ "$status" = 0 ] || { echo "a tune process failed" >&2; exit 1; }

STUDY=$STUDY "$PY" - <<'EOF'
"""Every trial once in Optuna and once in MLflow, under the study's parent run; both machines worked."""
import os, tempfile
import mlflow, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name=os.environ["STUDY"], storage=os.environ["OPTUNA_STORAGE"])
trials = study.get_trials()
parent = study.user_attrs["mlflow_parent_run_id"]
client = mlflow.MlflowClient()
children = client.search_runs([client.get_run(parent).info.experiment_id],
                              f"tags.`mlflow.parentRunId` = '{parent}'", max_results=1000)
problems = []
if [t.state.name for t in trials if t.state.name not in ("COMPLETE", "PRUNED")]:
    problems.append("trials not finished: " + ", ".join(f"{t.number} {t.state.name}" for t in trials))
by_number = {}
for run in children:
    by_number.setdefault(int(run.data.tags["optuna_trial_number"]), []).append(run.info.run_id)
if sorted(by_number) != sorted(t.number for t in trials) or any(len(v) != 1 for v in by_number.values()):
    problems.append(f"MLflow children by trial number {by_number} do not match trials {[t.number for t in trials]}")
if any(by_number.get(t.number, [None])[0] != t.user_attrs.get("mlflow_run_id") for t in trials):
    problems.append("a trial's mlflow_run_id is not its child run")
hosts = {t.user_attrs.get("worker") for t in trials}
if len(hosts) < 2:
    problems.append(f"only one process ran trials: {hosts}")
with tempfile.TemporaryDirectory() as tmp:
    report = mlflow.artifacts.download_artifacts(run_id=parent, artifact_path="study/report.html", dst_path=tmp)
    if "<html" not in open(report).read():
        problems.append("the parent run's study/report.html is not a page")
if problems:
    raise SystemExit("distributed tune FAILED: " + "; ".join(problems))
states = [t.state.name for t in trials]
print(f"distributed tune OK: {len(trials)} trials ({states.count('COMPLETE')} complete, "
      f"{states.count('PRUNED')} pruned) from {len(hosts)} processes, each once in Optuna and once "
      f"in MLflow under parent run {parent}; report fetched over HTTP")
EOF

# The study: machine-b's worker is killed in the middle of its first cell; machine-a, the
# coordinator, finds the cell's heartbeat stale, fails its run and trains it again.
study() { exec "$PY" -m pipeline.study --storage "$OPTUNA_STORAGE" --study-name distributed-study \
    --subset 600 --epochs 4 --seeds 80,81 --arms static,dynamic --budgets epochs,flops:0.5 \
    --heartbeat-interval 1 --grace-period 5 "$@"; }
(cd "$WORK/machine-a" && study >"$WORK/study-a.log" 2>&1) &
A=$!
(cd "$WORK/machine-b" && study --worker true >"$WORK/study-b.log" 2>&1) &
B=$!
KILLED=$(B=$B "$PY" - <<'EOF'
"""Wait for machine-b's first cell to be training, kill the process, print the cell's run id."""
import os, signal, time
import mlflow
deadline = time.time() + 600
while time.time() < deadline:
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.process_pid = '{os.environ['B']}' and attributes.status = 'RUNNING'")
    if runs and "study_cell" in runs[0].data.tags:
        os.kill(int(os.environ["B"]), signal.SIGKILL)
        print(runs[0].info.run_id)
        break
    try:
        os.kill(int(os.environ["B"]), 0)
    except ProcessLookupError:
        raise SystemExit("machine-b ended without starting a cell") from None
    time.sleep(0.2)
else:
    raise SystemExit("machine-b never started a cell")
EOF
)
status=0
wait $A || status=$?
wait $B || true  # killed, as meant
for m in a b; do sed "s/^/[study machine-$m] /" "$WORK/study-$m.log" | { grep -v -e "INFO mlflow" -e "View run" -e "View experiment" || true; } >&2; done
[ "$status" = 0 ] || { echo "the study's coordinator failed" >&2; exit 1; }
KILLED=$KILLED "$PY" - <<'EOF'
"""Every cell finished exactly once; the killed cell's run FAILED and its cell trained again."""
import os, tempfile
import mlflow, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
from pipeline.study import queue
study = optuna.load_study(study_name="distributed-study", storage=os.environ["OPTUNA_STORAGE"])
complete = [t.user_attrs["study_cell"] for t in queue.cell_trials(study) if t.state.name == "COMPLETE"]
killed = mlflow.MlflowClient().get_run(os.environ["KILLED"])
problems = []
if len(complete) != 8 or len(set(complete)) != 8:
    problems.append(f"cells finished {sorted(complete)}: not the 8 cells once each")
if killed.info.status != "FAILED" or killed.data.tags["study_cell"] not in complete:
    problems.append(f"the killed cell's run is {killed.info.status}, its cell {killed.data.tags.get('study_cell')}")
parent = study.user_attrs["mlflow_parent_run_id"]
with tempfile.TemporaryDirectory() as tmp:
    report = mlflow.artifacts.download_artifacts(run_id=parent, artifact_path="study/report.md", dst_path=tmp)
    if "dynamic@epochs vs static@epochs" not in open(report).read():
        problems.append("the parent run's study/report.md lacks its comparisons")
if problems:
    raise SystemExit("distributed study FAILED: " + "; ".join(problems))
print(f"distributed study OK: 8 cells, each finished once; the cell killed mid-run "
      f"({killed.data.tags['study_cell']}) trained again; report fetched over HTTP")
EOF

if [ "${SPEEDUP:-0}" = 1 ]; then
    # SPEEDUP=1: the wall-clock of one grid (2 seeds x static, dynamic x 2 budgets: 8 cells) on
    # these servers, one worker on every core against two workers on one core each.
    grid() { "$PY" -m pipeline.study --storage "$OPTUNA_STORAGE" --subset 4000 --epochs 6 --seeds 82,83 \
        --arms static,dynamic --budgets epochs,flops:0.5 "$@"; }
    cores=$(nproc)
    for n in 1 2; do
        start=$(date +%s.%N)
        (cd "$WORK/machine-a" && OMP_NUM_THREADS=$((cores / n)) grid --workers "$n" \
            --study-name "speedup-$n" >"$WORK/speedup-$n.log" 2>&1) || { tail -5 "$WORK/speedup-$n.log" >&2; exit 1; }
        end=$(date +%s.%N)
        echo "speedup: $n worker(s), $((cores / n)) thread(s) each: $(echo "$end - $start" | bc) s for 8 cells" >&2
    done
fi
[ "${FAULTS:-0}" = 1 ] || exit 0
# FAULTS=1: the shared set-up's faults, measured on the same servers (not run by the tests).
# 1. The MLflow tracking server is down for 30 s while a run trains, then back on its port.
restart_mlflow() {
    kill -- -"$MLFLOW_PID" 2>/dev/null || true
    sleep "$1"
    setsid "$PY" -m mlflow server --backend-store-uri "postgresql+psycopg2://postgres@127.0.0.1:$PG_PORT/mlflow" \
        --artifacts-destination "$WORK/artifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
        >>"$WORK/mlflow-server.log" 2>&1 &
    MLFLOW_PID=$!
}
(cd "$WORK/machine-a" && exec "$PY" -m pipeline.train_static --spec tiny --subset 4000 --val-size 500 \
    --epochs 80 --scores-run none --progress false --run-name fault-mlflow >"$WORK/fault-mlflow.log" 2>&1) &
T=$!
sleep 25
restart_mlflow 30
echo "fault 1: the MLflow server was down for 30 s while run fault-mlflow trained" >&2
t_status=0
wait $T || t_status=$?
sed "s/^/[fault-mlflow] /" "$WORK/fault-mlflow.log" | { grep -v -e "INFO mlflow" -e "View run" -e "View experiment" || true; } | tail -5 >&2
# 2. PostgreSQL (the Optuna storage and the MLflow backend) restarts while two tune workers share a study.
(cd "$WORK/machine-a" && exec "$PY" -m pipeline.tune --storage "$OPTUNA_STORAGE" --study-name fault-pg \
    --subset 600 --epochs 3 --n-trials 24 --workers 2 --pruner none >"$WORK/fault-pg.log" 2>&1) &
P=$!
sleep 40
RESTART_AT=$(date +%s)
as_pg "$BIN/pg_ctl" -D "$WORK/pg" -m fast -w restart -o "-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1" >/dev/null
echo "fault 2: PostgreSQL restarted while study fault-pg ran" >&2
p_status=0
wait $P || p_status=$?
sed "s/^/[fault-pg] /" "$WORK/fault-pg.log" | { grep -v -e "INFO mlflow" -e "View run" -e "View experiment" || true; } | tail -8 >&2
RESTART_AT=$RESTART_AT T_STATUS=$t_status P_STATUS=$p_status "$PY" - <<'EOF'
"""What each fault left: exit codes, run states, trials; nothing may stay RUNNING."""
import os
import mlflow, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
client = mlflow.MlflowClient()
runs = mlflow.search_runs(search_all_experiments=True, output_format="list", max_results=5000)
(run,) = [r for r in runs if r.info.run_name == "fault-mlflow"]
steps = [m.step for m in client.get_metric_history(run.info.run_id, "val/acc")]
print(f"fault 1 (MLflow server down 30 s): exit {os.environ['T_STATUS']}, run {run.info.status} after "
      f"{run.data.metrics.get('time/total_s', 0):.0f} s of training, "
      f"{len(steps)} val/acc points for {len(set(steps))} epochs, failure_reason "
      f"{run.data.tags.get('failure_reason', 'none')!r}")
study = optuna.load_study(study_name="fault-pg", storage=os.environ["OPTUNA_STORAGE"])
states = [t.state.name for t in study.trials]
restart = float(os.environ["RESTART_AT"])
after = sum(t.datetime_start is not None and t.datetime_start.timestamp() > restart for t in study.trials)
running = [r.info.run_name for r in runs if r.info.status == "RUNNING"]
print(f"fault 2 (PostgreSQL restart): exit {os.environ['P_STATUS']}, trials {dict((s, states.count(s)) for s in set(states))}, "
      f"{after} trials started after the restart, runs left RUNNING: {running or 'none'}")
EOF
