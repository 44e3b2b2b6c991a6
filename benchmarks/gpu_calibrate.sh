#!/usr/bin/env bash
# Calibrate a GPU for Llama-3.1-8B and its draft model Llama-3.2-1B (issue 23 part 4), as one
# prepared script for a machine with a GPU and torch but without specsim installed.
#
#   OUT=folder bash benchmarks/gpu_calibrate.sh [--quick]
#
# Wheels of specsim's pure dependencies missing there may sit in .whl/ (pydantic, simpy, ...);
# specsim itself is put on the path from this checkout (no install, nothing compiled).
# Writes to $OUT: the profile (<chip>-specsim-torch.yaml), the timed passes (-steps.jsonl),
# a check of the layer scaling (8B timed at 4 of 32 layers, scaled), and the log.
set -uo pipefail
OUT=${OUT:-gpu-calibration}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")/.." && pwd)
whl=${WHL:-$here/.whl}
if compgen -G "$whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/specsim-site "$whl"/*.whl || exit 1
fi
pkg=/tmp/specsim-pkg
rm -rf "$pkg" && mkdir -p "$pkg/specsim"
cp "$here"/specsim/*.py "$pkg/specsim/"
for sub in simulator cost_models traces; do ln -s "$here/$sub" "$pkg/specsim/$sub"; done
export PYTHONPATH=/tmp/specsim-site:$pkg PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 \
  | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" \
  | tee -a "$OUT/device.txt"
run() { python3 -c "import sys; from specsim.simulator.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
chip=H200-SXM
start=$(date +%s)
run calibrate --device cuda --model Llama-3.1-8B --model Llama-3.2-1B "$@" --force \
  --name "$chip-specsim-torch" --out "$OUT/$chip-specsim-torch.yaml" 2>&1 | tee "$OUT/log.txt"
rc=${PIPESTATUS[0]}
echo "full depth: $(( $(date +%s) - start )) s, exit $rc" | tee -a "$OUT/log.txt"
start=$(date +%s)
run calibrate --device cuda --model Llama-3.1-8B --layers 4 --quick --force \
  --name scaled-check --out "$OUT/scaled-check.yaml" 2>&1 | tee -a "$OUT/log.txt"
echo "scaled check: $(( $(date +%s) - start )) s, exit ${PIPESTATUS[0]}" | tee -a "$OUT/log.txt"
exit "$rc"
