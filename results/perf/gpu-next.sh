#!/bin/bash
# The next GPU session's one device call (issue 48), sized for a session with 15 minutes of device time: at
# most T_TOTAL (default 540) seconds of commands, so that a machine's start fits and a rerun of what was cut
# still has room. Run from the repository root on the device machine (Python 3.12, torch with CUDA; fedrepro
# from the source tree):
#
#   bash results/perf/gpu-next.sh          (device tool: carry [".data"], timeout_s 580)
#
# .data (git-ignored) holds Fashion-MNIST for step 5, made once on the machine that calls the device tool:
#   mkdir -p .data/FashionMNIST/raw && cp /usr/share/datasets/fashion-mnist/*.gz .data/FashionMNIST/raw/
# (Debian's dataset-fashion-mnist, 30 MB); without it step 5 is skipped and the others run.
#
# Steps, most wanted first; each has its own time limit (SIGINT, like Ctrl-C, then SIGKILL 15 s later: inductor
# compiling can swallow SIGINT) and is skipped when it would run
# past T_TOTAL; the log says each step's exit code and seconds:
#   1. validate: the CPU reference numbers on the GPU (float64 CNN problem, float32 dense problem)
#   2. compile: the FedBAT CNN step sequential / vectorized / compiled / compiled whole and replayed as a CUDA
#      graph (`--compile graph`), agreement with the uncompiled round, compile times
#   3. bench: the executors, the nn.Module limit and 8 batched runs with the restated targets (fraction of the
#      FP32 peak, 20x sequential, 60% of the module limit) met / NOT met, and torch.profiler tables
#   4. tf32-bench: the same FedBAT CNN bench with TF32 on (speed only; never the runs' default)
#   5. tf32-cell: FedBAT's claims cell, 20 rounds, TF32 off then on: seconds and the change in accuracy
# Everything is packed after each step into $OUT/gpu-next.tar.gz (the device tool returns at most 8 files), the
# log beside it. DEVICE=cpu runs the same steps on a CPU (a dry run of the script, not a measurement); the T_*
# variables shorten or lengthen the steps.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
export FEDREPRO_DATA=${FEDREPRO_DATA:-$PWD/.data}
OUT=${OUT:?set OUT to the folder that comes back}
DEVICE=${DEVICE:-cuda}
D=$(date +%F)
T0=$(date +%s)
TOTAL=${T_TOTAL:-540}
W="$OUT/gpu-next"
mkdir -p "$W"
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/gpu-next.log"; }
pack() { cp "$OUT/gpu-next.log" "$W/" 2>/dev/null; tar -czf "$OUT/gpu-next.tar.gz" -C "$OUT" gpu-next; }
step() {  # step NAME LIMIT_S COMMAND...: one command, its own log file, its exit code in the log
    local name=$1 limit=$2; shift 2
    local left=$(( TOTAL - ($(date +%s) - T0) ))
    if [ "$left" -lt 30 ]; then say "$name: skipped (${left}s left of ${TOTAL}s)"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "$name: start (limit ${limit}s)"
    timeout -s INT -k 15 "$limit" "$@" > "$W/$name.txt" 2>&1  # KILL 15 s after: inductor may swallow SIGINT
    say "$name: rc=$?"
    pack
}
say "device $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), T_TOTAL ${TOTAL}s"
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } \
    >> "$OUT/gpu-next.log" 2>&1
step validate "${T_VALIDATE:-150}" python3 -m benchmark.cli validate --device "$DEVICE" --out "$W/validate-$DEVICE.json"
step compile "${T_COMPILE:-180}" python3 -m benchmark.cli bench --preset fmnist_cnn --device "$DEVICE" \
    --compile graph --repeats 5 --out "$W/compile-graph-$DEVICE-$D.json"
step bench "${T_BENCH:-110}" python3 -m benchmark.cli bench --preset all --device "$DEVICE" --runs 8 --repeats 3 \
    --out "$W/bench-$DEVICE-$D.json" --profile "$W/profile-$DEVICE-$D.txt"
step tf32-bench "${T_TF32:-60}" python3 -m benchmark.cli bench --preset fmnist_cnn --device "$DEVICE" --tf32 \
    --runs 8 --repeats 3 --out "$W/bench-tf32-$DEVICE-$D.json"
if ls "$FEDREPRO_DATA"/FashionMNIST/raw/train-images-idx3-ubyte* >/dev/null 2>&1 || [ -d /usr/share/datasets/fashion-mnist ]; then
    step tf32-cell "${T_CELL:-90}" python3 -m benchmark.cli bench --tf32-cell --profile-rounds "${CELL_ROUNDS:-20}" \
        --device "$DEVICE" --out "$W/tf32-cell-$DEVICE-$D.json"
else
    say "tf32-cell: skipped (no Fashion-MNIST under $FEDREPRO_DATA: carry .data, see the header)"
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$OUT/gpu-next.log" 2>&1
say done
pack
