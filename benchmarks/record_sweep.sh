#!/usr/bin/env bash
# The recorded sweeps (benchmarks/results/sweep, benchmarks/results/sweep_L4) and their figures.
# Resumable: rerun this script after an interrupt; finished tasks are kept.
# Run from the repository root with `speclp` importable (e.g. PYTHONPATH=<parent of the repo>).
set -u
VERIFIERS=token,bv,gbv,gbv_clipped,specinfer,rrsw,naive_tree,khisti,spectr,spectr_gbv,nss,traversal,nodeopt
COMMON=(--paths 1,2,3,4 --alpha 0.5,1 --trials 2 --seed 0 --max-enumerated 20000 --samples 4096
        --verifiers "$VERIFIERS" --workers 1 --json)
python -m speclp sweep --vocab 2,3,4,8 --depth 1,2,3 "${COMMON[@]}" \
    --out benchmarks/results/sweep > benchmarks/results/sweep_summary.json
echo "sweep exit $?"
python -m speclp plot benchmarks/results/sweep --out benchmarks/results/sweep_figures --json \
    > /dev/null
python -m speclp sweep --vocab 2,3 --depth 4 "${COMMON[@]}" \
    --out benchmarks/results/sweep_L4 > benchmarks/results/sweep_L4_summary.json
echo "sweep_L4 exit $?"
python -m speclp plot benchmarks/results/sweep_L4 --out benchmarks/results/sweep_L4_figures --json \
    > /dev/null
