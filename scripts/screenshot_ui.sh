#!/usr/bin/env bash
# What a user sees in the MLflow UI, as PNG files: starts the UI on 127.0.0.1 against a tracking
# store, screenshots the runs list, a compare view of the training runs and one run's artifacts
# with headless Chromium (Debian's package, installed if absent and this is root), then stops
# the UI.
#
#   scripts/screenshot_ui.sh                                  # the store of scripts/run
#   scripts/screenshot_ui.sh sqlite:////tmp/store/mlflow.db /tmp/shots
#
# Arguments: the tracking store (default $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db) and the
# folder for the PNGs (default ui-screenshots/). The experiment shown is growing-cnn, or
# $EXPERIMENT_NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
STORE=${1:-${MLFLOW_TRACKING_URI:-sqlite:///mlflow.db}}
OUT=${2:-ui-screenshots}
EXPERIMENT=${EXPERIMENT_NAME:-growing-cnn}
PY=.venv/bin/python
mkdir -p "$OUT"

CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROME" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Chromium from Debian's packages" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
        CHROME=$(command -v chromium)
    else
        echo "error: no Chromium; install Debian's chromium package (apt-get install chromium)" >&2
        exit 2
    fi
fi

# The pages to take: experiment id, the training runs to compare and a run with artifacts.
read -r EXP_ID RUN_ID COMPARE < <(MLFLOW_TRACKING_URI=$STORE "$PY" - "$EXPERIMENT" <<'EOF'
import json, sys, urllib.parse
import mlflow
experiment = mlflow.get_experiment_by_name(sys.argv[1])
if experiment is None:
    sys.exit(f"error: no experiment {sys.argv[1]!r} in {mlflow.get_tracking_uri()}")
runs = mlflow.search_runs([experiment.experiment_id], output_format="list",
                          order_by=["attributes.start_time ASC"])
training = [r for r in runs if r.data.tags.get("entry_point") in ("train_static", "train_dynamic")]
if not training:
    sys.exit(f"error: experiment {sys.argv[1]!r} has no training runs to show")
dynamic = [r for r in training if r.data.tags["entry_point"] == "train_dynamic"]
shown = (dynamic or training)[0].info.run_id
ids = json.dumps([r.info.run_id for r in training[:6]])
experiments = json.dumps([experiment.experiment_id])
query = f"runs={urllib.parse.quote(ids)}&experiments={urllib.parse.quote(experiments)}"
print(experiment.experiment_id, shown, query)
EOF
)

PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
LOG="$OUT/mlflow-ui.log"
setsid .venv/bin/mlflow ui --backend-store-uri "$STORE" --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
UI_PID=$!
stop_ui() { kill -TERM -- "-$UI_PID" 2>/dev/null || true; wait "$UI_PID" 2>/dev/null || true; }
trap stop_ui EXIT
for _ in $(seq 1 60); do
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 "$UI_PID" 2>/dev/null || { echo "error: the MLflow UI did not start; see $LOG" >&2; exit 1; }
    sleep 1
done

BASE="http://127.0.0.1:$PORT/#"
shoot() {  # name, url: a 1600x1000 page after the UI's requests have settled
    "$CHROME" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1000 \
        --virtual-time-budget=20000 --screenshot="$OUT/$1.png" "$2" >/dev/null 2>&1
    echo "$OUT/$1.png  <- $2"
}
# As a new user first sees it (MLflow 3.17 starts its sidebar in GenAI mode; the experiment's
# kind tag still opens it on its training runs), then in "Model training" mode, which a user
# picks once with the toggle at the top left (the UI remembers it; here a URL parameter).
ML="workflowType=machine_learning"
shoot runs-list-first-visit "$BASE/experiments/$EXP_ID/runs"
shoot runs-list "$BASE/experiments/$EXP_ID/runs?$ML"
shoot compare "$BASE/compare-runs?$COMPARE&$ML"
shoot run-artifacts "$BASE/experiments/$EXP_ID/runs/$RUN_ID/artifacts?$ML"
shoot run-overview "$BASE/experiments/$EXP_ID/runs/$RUN_ID?$ML"
shoot models "$BASE/experiments/$EXP_ID/models?$ML"
