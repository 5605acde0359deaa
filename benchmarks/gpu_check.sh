#!/usr/bin/env bash
# CUDA readiness check of issue 20 (part 4), for a machine with one GPU; under 10 minutes (step limits 120 + 150 + 240 + 60 s).
#   bash benchmarks/gpu_check.sh [OUT]      (OUT default: benchmarks/results/beyond/gpu)
# 1. tests/test_devices.py: the exact laws of bv, gbv, nodeopt, specinfer on the GPU equal the
#    CPU's (float64, every draft configuration) and are lossless there (TV <= 1e-12); no host
#    synchronisation inside a step.
# 2. benchmarks/verifier_step.py on the GPU (1 thread; float32 and bfloat16; K 2..4; L 4, 8):
#    step times side by side and the achieved bandwidth (H200 peak 4800 GB/s given).
# 3. A paired `speclp bench` of 164 HumanEval prompts at K = 3, L = 4, T = 1.0 (bv, gbv,
#    nodeopt scored on the same trees, nodeopt decoding). Needs the qwen2.5-coder pair in the
#    local Hugging Face cache (the machine has no network).
# 4. benchmarks/device_audit.py: the sampler audit of gbv and nodeopt with the law on the GPU.
# Each step has its own time limit; a failed step is reported and the next one still runs.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/benchmarks/results/beyond/gpu}"
mkdir -p "$OUT"
PKG="$(mktemp -d)"
ln -s "$ROOT" "$PKG/speclp"   # the repository root is the package speclp
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
status=0
step() {  # step NAME SECONDS COMMAND...
  local name="$1" limit="$2"; shift 2
  echo "== $name (limit ${limit}s)"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - start))s (log: $OUT/$name.log)"; tail -n 5 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))" >> "$OUT/gpu.txt" 2>&1
step devices_test 120 python -m pytest -q tests/test_devices.py -p no:cacheprovider -rs
step verifier_step 150 python benchmarks/verifier_step.py --device cuda --threads 1 --rounds 10 \
  --peak-gbs 4800 --out "$OUT/verifier_step_cuda.json"
step bench 240 python -m speclp bench --pair qwen2.5-coder --prompts humaneval:164 --paths 3 \
  --depth 4 --temperature 1.0 --verifiers bv,gbv,nodeopt --drive nodeopt --batch 32 \
  --device cuda --out "$OUT/bench" --json
step device_audit 60 python benchmarks/device_audit.py --device cuda --out "$OUT/device_audit_cuda.json"
rm -rf "$PKG"
exit $status
