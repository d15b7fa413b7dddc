#!/bin/bash
# One call on a lent GPU machine (run from the repository root there, $OUT set by the device tool):
# install the carried wheels (.gpu-carry: what the machine's image lacks), then `workbench gpu-check` with
# the steps given as arguments, evidence.py's parts named in EVIDENCE (default: the CUDA workspace probe),
# host_evidence.py's named in HOST_EVIDENCE (none by default) and, with NCU_SECONDS, Nsight Compute on matmul
# and Adam.
#   EVIDENCE="profile memory" bash docs/gpu/raw/device_call.sh --steps doctor kernels
set -o pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu-carry/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
for part in ${EVIDENCE:-workspaces}; do  # evidence.py's parts, each to $OUT/<part>.json (8 files come back)
    timeout "${EVIDENCE_SECONDS:-120}" python3 docs/gpu/raw/evidence.py "$part" > "$OUT/$part.json" 2>&1
    echo "evidence $part rc=$?"; tail -c 1500 "$OUT/$part.json"
done
for part in $HOST_EVIDENCE; do  # host_evidence.py's parts (launch, trainer), each to $OUT/host-<part>.txt
    timeout "${EVIDENCE_SECONDS:-120}" python3 docs/gpu/raw/host_evidence.py "$part" > "$OUT/host-$part.txt" 2>&1
    echo "host evidence $part rc=$?"; tail -c 1500 "$OUT/host-$part.txt"
done
timeout "${CHECK_SECONDS:-430}" python3 -m workbench gpu-check --budget 900 --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
if [ -n "$NCU_SECONDS" ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    timeout "$NCU_SECONDS" "$NCU" --profile-from-start off --clock-control none --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
        --csv --page details python3 docs/gpu/raw/evidence.py kernels > "$OUT/ncu.csv" 2> "$OUT/ncu-err.txt"
    echo "ncu rc=$?"; tail -3 "$OUT/ncu-err.txt"; wc -l "$OUT/ncu.csv"
fi
