#!/bin/bash
# One call on a lent GPU machine (run from the repository root there, $OUT set by the device tool):
# install the carried wheels (.gpu-carry: what the machine's image lacks), then `workbench gpu-check` with
# the steps given as arguments, the CUDA workspace probe and Nsight Compute on matmul and Adam.
#   bash docs/gpu/raw/device_call.sh --steps doctor kernels
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu-carry/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 docs/gpu/raw/evidence.py workspaces > "$OUT/workspaces.json" 2>&1
timeout "${CHECK_SECONDS:-430}" python3 -m workbench gpu-check --budget 900 --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
if [ -n "$NCU_SECONDS" ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    timeout "$NCU_SECONDS" "$NCU" --profile-from-start off --clock-control none --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
        --csv --page details python3 docs/gpu/raw/evidence.py kernels > "$OUT/ncu.csv" 2> "$OUT/ncu-err.txt"
    echo "ncu rc=$?"; tail -3 "$OUT/ncu-err.txt"; wc -l "$OUT/ncu.csv"
fi
cat "$OUT/workspaces.json"
