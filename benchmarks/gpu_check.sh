#!/usr/bin/env bash
# GPU check of issues 20 (part 4) and 33 (part 5), for a machine with one GPU and NO models,
# registry or network (a lent machine): 8 minutes at most (step limits 120 + 300 + 60 s; not yet
# timed on a GPU: the CPU path took about 40 s in all on one loaded core).
#   bash benchmarks/gpu_check.sh [OUT]     (OUT default: $OUT if set, else benchmarks/results/gpu/run)
#   DEVICE=cpu bash benchmarks/gpu_check.sh /tmp/gpu_check_cpu     (the CPU path, small step bench)
# Needs there: python3 with torch and numpy (pytest for step 1); nothing else (no transformers,
# no models). The dumps it reads are committed (benchmarks/results/gpu/trees, about 25 MB).
# 1. tests/test_devices.py: the exact laws of bv, gbv, nodeopt, specinfer on the GPU equal the
#    CPU's (float64, every draft configuration of small instances) and are lossless there
#    (TV <= 1e-12); no host synchronisation inside a step.
# 2. benchmarks/gpu_laws.py: every registered verifier's law on the real-model trees dumped by
#    benchmarks/dump_trees.py (smollm2-135m and qwen2.5-coder rows, V = 49,152 and 151,936),
#    on the GPU in float64 and float32 and on the CPU in float32, each against the CPU's
#    float64 (float64: 1e-12; float32: max(1e-4, 4x the CPU's own float32 deviation), its
#    docstring says why); then the verifier-step
#    benchmark (benchmarks/verifier_step.py: K 2..4, L 4 and 8, float32 and bfloat16, 1 thread,
#    the achieved bandwidth against --peak-gbs).
# 3. benchmarks/device_audit.py: the sampler audit of gbv and nodeopt with the law on the GPU.
# 4. Only with SPECLP_GPU_BENCH=1 (a GPU machine WITH the qwen2.5-coder pair in the local
#    cache, which a lent machine is not): a paired `speclp bench --device cuda` of 164 HumanEval
#    prompts at K = 3, L = 4, T = 1.0 (limit 240 s). That is the path for users with a GPU and
#    the models.
# Each step has its own time limit; a failed step is reported and the next one still runs; the
# exit status is 1 if any failed. OUT gets at most 5 files: check.log (every step's output),
# gpu_laws.json, gpu_laws.md, device_audit.json (and bench/ with step 4).
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT_DIR="${1:-${OUT:-$ROOT/benchmarks/results/gpu/run}}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/check.log"
: > "$LOG"
PKG="$(mktemp -d)"
ln -s "$ROOT" "$PKG/speclp"   # the repository root is the package speclp
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python3}"
cd "$ROOT"
DEVICE="${DEVICE:-$($PYTHON -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
status=0
step() {  # step NAME SECONDS COMMAND...
  local name="$1" limit="$2"; shift 2
  echo "== $name (limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "   $name: rc=$rc in $((SECONDS - start))s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || status=1
}
{
  echo "device $DEVICE; $(date -u +%Y-%m-%dT%H:%M:%SZ); commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  $PYTHON -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1
} >> "$LOG"
if [ "$DEVICE" = cpu ]; then  # small settings: this is the path that runs where no GPU is lent
  STEP_ARGS=(--step-paths 3 --step-depths 4 --step-dtypes float32 --step-rounds 2)
  AUDIT_ARGS=(--runs 5000)
else
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
    *H200*) PEAK=4800 ;; *H100*) PEAK=3350 ;; *) PEAK="" ;;
  esac
  STEP_ARGS=(--step-rounds 5 ${PEAK:+--peak-gbs "$PEAK"})
  AUDIT_ARGS=()
fi
step devices_test 120 $PYTHON -m pytest -q tests/test_devices.py -p no:cacheprovider -rs
step gpu_laws 300 $PYTHON benchmarks/gpu_laws.py --device "$DEVICE" --out "$OUT_DIR" "${STEP_ARGS[@]}"
step device_audit 60 $PYTHON benchmarks/device_audit.py --device "$DEVICE" --out "$OUT_DIR/device_audit.json" \
  ${AUDIT_ARGS[@]+"${AUDIT_ARGS[@]}"}
if [ "${SPECLP_GPU_BENCH:-0}" = 1 ]; then
  step bench 240 $PYTHON -m speclp bench --pair qwen2.5-coder --prompts humaneval:164 --paths 3 \
    --depth 4 --temperature 1.0 --verifiers bv,gbv,nodeopt --drive nodeopt --batch 32 \
    --device "$DEVICE" --out "$OUT_DIR/bench" --json
fi
rm -rf "$PKG"
echo "gpu_check: $([ $status -eq 0 ] && echo PASS || echo FAIL); log $LOG" | tee -a "$LOG"
exit $status
