#!/usr/bin/env bash
# One prepared call on a lent GPU machine (after scripts/device/pack.sh here; `run` with carry [".device"]):
#   bash scripts/device/check.sh [tests,limits,default,sweep | all]   (default: all; about 9 minutes on an H100)
#   CLAIMS="dgt_fig5 --presets dgt_fig5_mnist --seeds 5 algo=fedavg" bash scripts/device/check.sh claims
# Writes under $OUT (or out/ without one): what each step printed, the bench's records, and the runs' logs. Each
# step has a time limit, so that one call leaves what it finished even when a later step runs long.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/.device/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" FEDRUN_DATA="$PWD/.device/data"
export FEDRUN_COMMIT="$(cat .device/commit 2>/dev/null)" WANDB_MODE=disabled HYDRA_FULL_ERROR=1
# the tests' CPU reference runs use torch's operators: compiling fedrun's CPU kernels would spend device time
export CXX=/nonexistent/g++
PY=${PYTHON:-python}
HW=${HW:-gpu}  # HW=cpu EXTRA="fl.rounds=1" PYTHON=.venv/bin/python: a dry run of the kit's steps without a GPU
EXTRA=${EXTRA:-}
what=",${1:-all},"
step() {  # step NAME SECONDS COMMAND...: the command's output in $OUT/NAME.log, its status and seconds in steps.tsv
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$OUT/steps.tsv"
}
{ nvidia-smi; $PY -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; } > "$OUT/machine.log" 2>&1
if [[ $what == *,all,* || $what == *,tests,* ]]; then
  # the executors' equality on the GPU (every path against the CPU loop in float64), captured graphs included
  step tests 180 $PY -m pytest -q -x -p no:cacheprovider tests/test_gpu.py tests/test_graph_executor.py \
    tests/test_precision.py
fi
if [[ $what == *,all,* || $what == *,limits,* ]]; then
  # each cohort's round under vmap / graph (and as one network), every precision, beside the chip's floors
  step limits 240 $PY -m fedrun.bench.limits --out "$OUT/limits-gpu.json"
fi
if [[ $what == *,all,* || $what == *,default,* ]]; then
  # the default experiment end to end: today's GPU path (vmap) against the graph executor, float32 and bfloat16
  for form in "vmap" "graph" "graph hardware.precision=bfloat16" "graph hardware.cohort_network=true"; do
    set -- $form
    name="default-$(IFS=-; echo -n "$*" | tr -c 'a-z0-9-' '-')"
    step "$name" 60 $PY -m fedrun.cli hardware=$HW "hardware.executor=$1" "${@:2}" $EXTRA \
      "hydra.run.dir=$OUT/runs/$name"
  done
fi
if [[ $what == *,all,* || $what == *,sweep,* ]]; then
  # 16 seeds of the default experiment: one after another, and four jobs at a time sharing the GPU
  step sweep-serial 150 $PY -m fedrun.cli -m "seed=range(16)" hardware=$HW hardware.executor=graph $EXTRA \
    "hydra.sweep.dir=$OUT/sweeps/serial"
  step sweep-shared 120 $PY -m fedrun.cli -m "seed=range(16)" hardware=$HW hardware.executor=graph $EXTRA \
    hydra/launcher=gpu_shared hardware.memory_share=0.25 "hydra.sweep.dir=$OUT/sweeps/shared"
fi
if [[ $what == *,claims,* ]]; then
  # a claims table's grid (not in `all`): $CLAIMS is fedrun-table's artefact, options and overrides; four jobs share
  # the GPU, and the runs come back under $OUT/claims. Render them here, at the commit they ran at:
  #   fedrun-table <artefact> --collect-only --runs <files_at>/claims --out results/<paper>
  # Runs stopped by the step's limit (CLAIMS_S seconds) keep their checkpoints: copy $OUT/claims into an ignored folder,
  # carry it, and call again with CLAIMS_RUNS=<that folder> and resume=true in $CLAIMS.
  runs=${CLAIMS_RUNS:-$OUT/claims}
  step claims "${CLAIMS_S:-480}" $PY -c "import sys; from fedrun.papers.table import main; sys.exit(main())" \
    ${CLAIMS:?CLAIMS names the artefact to run} hardware=$HW hydra/launcher=gpu_shared hardware.memory_share=0.25 \
    progress=false $EXTRA --runs "$runs"
  [[ $runs == "$OUT/claims" ]] || cp -r "$runs" "$OUT/claims"
fi
# one table of the runs above: process seconds, first round, the later rounds' mean, final accuracy
$PY - "$OUT" > "$OUT/summary.md" 2>&1 <<'PYEOF'
import csv, sys
from pathlib import Path
out = Path(sys.argv[1])
steps = {row[0]: row[1:] for row in csv.reader((out / "steps.tsv").open(), delimiter="\t")} if (out / "steps.tsv").exists() else {}
print("| step | exit | process s | first round s | later rounds ms (mean) | final test acc |\n|---|---|---|---|---|---|")
for name, (rc, secs) in steps.items():
    metrics = out / "runs" / name / "metrics.csv"
    first = later = acc = ""
    if metrics.exists():
        rows = list(csv.DictReader(metrics.open()))
        t = [float(r["elapsed_s"]) for r in rows]
        first, acc = f"{t[0]:.2f}", rows[-1]["test_acc"]
        later = f"{1e3 * (t[-1] - t[0]) / (len(t) - 1):.0f}" if len(t) > 1 else ""
    print(f"| {name} | {rc} | {secs} | {first} | {later} | {acc} |")
PYEOF
cat "$OUT/summary.md"
