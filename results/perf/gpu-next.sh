#!/bin/bash
# The next GPU session's one device call (issue 25, steps 1 and 2), sized for a session with 15 minutes of
# device time: about 8 minutes of commands, so a rerun still fits. Run from the repository root on the device
# machine (Python 3.12, torch with CUDA; fedrepro from the source tree):
#
#   bash results/perf/gpu-next.sh          (device tool: carry [], timeout_s 560)
#
# Each step has its own time limit (SIGINT, like Ctrl-C: what a step finished is kept) and writes under $OUT;
# the log says each step's exit code and seconds. DEVICE=cpu runs the same steps on a CPU (a dry run of the
# script itself, not a measurement); the T_* variables shorten or lengthen the steps.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder that comes back}
DEVICE=${DEVICE:-cuda}
D=$(date +%F)
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/gpu-next.log"; }
step() {  # step NAME LIMIT_S COMMAND...: one command, its own log file, its exit code in the log
    local name=$1 limit=$2; shift 2
    say "$name: start (limit ${limit}s)"
    timeout -s INT "$limit" "$@" > "$OUT/$name.txt" 2>&1
    say "$name: rc=$?"
}
say "device $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } \
    >> "$OUT/gpu-next.log" 2>&1
# 1. validate: float64 CNN problem and float32 dense problem against the CPU reference (41 s on an H100 in
#    float32; float64 convolutions are slower on a GPU, hence the margin)
step validate "${T_VALIDATE:-180}" python3 -m benchmark.cli validate --device "$DEVICE" --out "$OUT/validate-$DEVICE.json"
# 2. the compiled vectorized step of FedBAT's CNN against uncompiled and sequential (issue 25's 20x target)
step compile "${T_COMPILE:-180}" python3 -m benchmark.cli bench --preset fmnist_cnn --device "$DEVICE" --compile \
    --out "$OUT/compile-$DEVICE-$D.json"
# 3. the executors and a batched group of 8 runs, with torch.profiler tables for a missed target
step bench "${T_BENCH:-140}" python3 -m benchmark.cli bench --preset all --device "$DEVICE" --runs 8 --repeats 3 \
    --out "$OUT/bench-$DEVICE-$D.json" --profile "$OUT/profile-$DEVICE-$D.txt"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$OUT/gpu-next.log" 2>&1
say done
