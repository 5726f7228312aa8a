#!/bin/bash
# One prepared GPU session for issue 25: validate, measure, then as many FedBAT Table 1 cells
# (FMNIST, N = 30, paper scale) as the remaining time allows. Every stage has its own limit and
# writes under $OUT as it goes, so a stage that fails or is cut leaves the others' files.
# Usage: DEV=cuda BUDGET=540 bash .gpu/session.sh   (BUDGET: seconds for the whole script)
export PYTHONPATH=. PYTHONUNBUFFERED=1
DEV=${DEV:-cuda}
T0=$(date +%s); END=$((T0 + ${BUDGET:-540}))
left() { echo $((END - $(date +%s))); }
LOG=$OUT/session.log
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }

{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())";
  nproc; } >> "$LOG" 2>&1

# records leave the machine even if the script is cut: an archive every 30 s
( while sleep 30; do
    [ -d results/fedbat_table1 ] && tar czf /tmp/rec.tgz results/fedbat_table1 2>/dev/null && cp /tmp/rec.tgz "$OUT/table1-records.tgz"
  done ) &
ARCH=$!

say "validate"
timeout -s INT "${T_VALIDATE:-150}" python3 -m benchmark.cli validate --device "$DEV" ${VALIDATE_ARGS} \
  --out "$OUT/validate.json" > "$OUT/validate.txt" 2>&1
say "validate rc=$?"

say "bench"
timeout -s INT "${T_BENCH:-170}" python3 -m benchmark.cli bench --preset all --device "$DEV" --runs "${RUNS:-16}" \
  ${BENCH_ARGS} --out "$OUT/bench.json" --profile "$OUT/profile.txt" > "$OUT/bench.txt" 2>&1
say "bench rc=$?"

# runs per group: 5 seeds, fewer if the measured batched throughput says 5 would not finish in time
group_size() {
  python3 - "$OUT/bench.json" "$1" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    s = [x for x in d["runs"] if x["model"] == "fedbat_cnn"][0]["batched_sample_gradients_per_s"]
except Exception:
    print(5); sys.exit()
per_run = 2 * 2e7 / s   # 2e7 sample-gradients per cell (100 rounds x 10 clients x 10 epochs x 2000); x2: margin
print(max(0, min(5, int(float(sys.argv[2]) / per_run))))
PY
}

# FedBAT Table 1, FMNIST, N = 30: FedBAT then FedAvg, one partition at a time, groups of up to 5 seeds
for part in iid dirichlet:0.3 labelcnt:3; do
  for alg in fedbat fedavg; do
    L=$(( $(left) - 20 ))
    G=$(group_size "$L")
    [ "$L" -lt 60 ] || [ "$G" -lt 1 ] && { say "stop: ${L}s left, group size $G"; break 2; }
    say "table1 $alg $part (limit ${L}s, group-runs $G)"
    timeout -s INT "$L" python3 -m benchmark.cli run --suite fedbat_table1 --only dataset=fmnist \
      --only num_clients=30 --only "algorithm=$alg" --only "partition=$part" --device "$DEV" --data-root .data \
      --publish --group-runs "$G" --no-progress ${RUN_ARGS} >> "$OUT/table1.txt" 2>&1
    say "table1 $alg $part rc=$?"
  done
done
kill "$ARCH" 2>/dev/null
[ -d results/fedbat_table1 ] && tar czf "$OUT/table1-records.tgz" results/fedbat_table1
say "done"
