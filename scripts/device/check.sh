#!/usr/bin/env bash
# One prepared call on a lent GPU machine, within 7 minutes (after scripts/device/pack.sh here; `run` with carry
# [".device"] and timeout_s 480):
#   bash scripts/device/check.sh [tests,limits,default,sweep | all]   (default: all)
#   CLAIMS="dgt_fig5 --presets dgt_fig5_mnist --seeds 5 algo=fedavg" bash scripts/device/check.sh claims
# Every step has its own limit (`timeout -k`: a hang is killed too) and the limits add to under 7 minutes, so one call
# leaves what it finished even when a step runs long. The steps write into a scratch folder ($WORK); at the end it is
# packed into $OUT/kit.tar.gz (the machine returns a few files, two folders deep at most) beside $OUT/summary.md, the
# table of every step. HW=cpu PYTHON=.venv/bin/python EXTRA="fl.rounds=1" LIMITS="--quick --precisions float32"
# LIMIT_SCALE=6 FEDRUN_DATA=<a data folder>: the same steps without a GPU, each limit 6 times longer (tests/
# test_device_kit.py runs it so).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD/.device/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" FEDRUN_DATA="${FEDRUN_DATA:-$PWD/.device/data}"
export FEDRUN_COMMIT="$(cat .device/commit 2>/dev/null)" WANDB_MODE=disabled HYDRA_FULL_ERROR=1 PYTHONUNBUFFERED=1
# the tests' CPU reference runs use torch's operators: compiling fedrun's CPU kernels would spend device time
export CXX=/nonexistent/g++
PY=${PYTHON:-python3}
HW=${HW:-gpu}
EXTRA=${EXTRA:-}
LIMITS=${LIMITS:-}
what=",${1:-all},"
wanted() { [[ $what == *,all,* || $what == *,$1,* ]]; }
step() {  # step NAME SECONDS COMMAND...: its output in $WORK/NAME.log, its status and seconds in $WORK/steps.tsv
  local name=$1 limit=$(($2 * ${LIMIT_SCALE:-1})); shift 2
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$WORK/steps.tsv"
}
{ nvidia-smi || true; $PY -c "import torch; print(torch.__version__, torch.cuda.is_available() and \
torch.cuda.get_device_name())"; } > "$WORK/machine.log" 2>&1
if wanted tests; then
  # the graph executor's capture first (its control flow, its hazards, BatchNorm), then the GPU's equality with the
  # CPU loop; no -x: every failure is wanted, and -rA names each outcome
  step tests-capture 50 $PY -m pytest -q -rA -p no:cacheprovider tests/engine/execution/test_graph_executor.py
  step tests-gpu 70 $PY -m pytest -q -rA -p no:cacheprovider tests/engine/execution/test_gpu.py tests/engine/execution/test_precision.py
fi
if wanted limits; then
  # the 1000- and 100-client LeNet-5 rounds under each form, each form its own step: one form's error leaves the others
  for form in vmap graph vmap_network graph_network; do
    step "limits-$form" 20 $PY -m fedrun.bench.limits --forms "$form" --only lenet5_cifar_1000,lenet5_cifar_100 \
      --repeats 2 $LIMITS --out "$WORK/limits-$form.json"
  done
  # the speed levers, each an A/B pair beside the default form: cuDNN's timed algorithms, the other image layout
  step limits-levers 20 $PY -m fedrun.bench.limits --forms vmap --only lenet5_cifar_100 --precisions float32 \
    --levers cudnn_benchmark,layout --repeats 2 $LIMITS --out "$WORK/limits-levers.json"
fi
if wanted default; then
  # the default experiment end to end: the GPU's default path (vmap; the first, so it also pays CUDA's start) against
  # the graph executor's forms
  for form in "vmap" "graph" "graph hardware.precision=bfloat16" "graph hardware.cohort_network=true"; do
    set -- $form
    name="default-$(IFS=-; echo -n "$*" | tr -c 'a-z0-9-' '-')"
    step "$name" "$([[ $1 == vmap ]] && echo 25 || echo 15)" $PY -m fedrun.cli hardware=$HW "hardware.executor=$1" "${@:2}" checkpoint.every=0 progress=false \
      $EXTRA "hydra.run.dir=$WORK/runs/$name"
  done
fi
if wanted sweep; then
  # 16 seeds of the default experiment: one after another, then four jobs at a time sharing the GPU
  step sweep-serial 70 $PY -m fedrun.cli -m "seed=range(16)" hardware=$HW hardware.executor=graph checkpoint.every=0 \
    progress=false $EXTRA "hydra.sweep.dir=$WORK/sweeps/serial"
  step sweep-shared 50 $PY -m fedrun.cli -m "seed=range(16)" hardware=$HW hardware.executor=graph checkpoint.every=0 \
    progress=false $EXTRA hydra/launcher=gpu_shared hardware.memory_share=0.25 "hydra.sweep.dir=$WORK/sweeps/shared"
fi
if [[ $what == *,claims,* ]]; then
  # a claims table's grid (not in `all`): $CLAIMS is fedrun-table's artefact, options and overrides; four jobs share
  # the GPU, and the runs come back in the tar file under claims/. Render them here, at the commit they ran at:
  #   fedrun-table <artefact> --collect-only --runs <unpacked>/claims --out results/<paper>
  # Runs stopped by the step's limit (CLAIMS_S seconds) keep their checkpoints: unpack them into an ignored folder,
  # carry it, and call again with CLAIMS_RUNS=<that folder> and resume=true in $CLAIMS.
  runs=${CLAIMS_RUNS:-$WORK/claims}
  step claims "${CLAIMS_S:-400}" $PY -c "import sys; from fedrun.papers.table import main; sys.exit(main())" \
    ${CLAIMS:?CLAIMS names the artefact to run} hardware=$HW hydra/launcher=gpu_shared hardware.memory_share=0.25 \
    progress=false $EXTRA --runs "$runs"
  [[ $runs == "$WORK/claims" ]] || cp -r "$runs" "$WORK/claims"
fi
$PY scripts/device/summary.py "$WORK" > "$OUT/summary.md" 2>&1
cp "$OUT/summary.md" "$WORK/summary.md"
# everything in one file; checkpoints only where a claims run may resume from them
tar -czf "$OUT/kit.tar.gz" -C "$WORK" $([[ $what == *,claims,* ]] || echo --exclude='*.pt') .
echo "kit.tar.gz: $(du -h "$OUT/kit.tar.gz" | cut -f1) (the machine returns files up to 16 MiB)" >> "$OUT/summary.md"
cat "$OUT/summary.md"
