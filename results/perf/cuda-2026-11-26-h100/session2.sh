#!/bin/bash
# Second call: why the batched path differs on CUDA (diag.py), the bench again (fewer runs, with the
# profile), then seconds per round of real Table 1 cells (probe.py).
export PYTHONPATH=. PYTHONUNBUFFERED=1 FEDREPRO_DATA=.data
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/session2.log"; }
say diag
timeout -s INT "${T_DIAG:-100}" python3 .gpu/diag.py cuda fedavg > "$OUT/diag.txt" 2>&1; say "diag rc=$?"
say bench
timeout -s INT "${T_BENCH:-150}" python3 -m benchmark.cli bench --preset all --device cuda --runs "${RUNS:-8}" \
  --repeats 3 --out "$OUT/bench.json" --profile "$OUT/profile.txt" > "$OUT/bench.txt" 2>&1; say "bench rc=$?"
say probe
timeout -s INT "${T_PROBE:-130}" python3 .gpu/probe.py cuda 2 > "$OUT/probe.txt" 2>&1; say "probe rc=$?"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$OUT/session2.log" 2>&1
say done
