#!/usr/bin/env bash
# A decode copy lane's feasibility on the H200 host (repo root, carry [".whl"]): bench.kernel.dma_share at 8 threads,
# 2 and 1 experts a kernel call (a decode layer's misses), one 8 GiB synthetic store in /dev/shm kept between them.
#   usage: [BUDGET_S=400] bash bench/device/dma_share.sh        results: $OUT/dma_share-*.txt
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUDGET_S=${BUDGET_S:-400}
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
STORE=/dev/shm/neural-dma-share.nstore
for e in 2 1; do
  [ "$(left)" -lt 80 ] && { echo "skip experts=$e: $(left)s left"; continue; }
  echo "== experts $e ($(( $(date +%s) - T0 )) s)"
  timeout "$(( $(left) - 10 ))" "$PY" -m bench.kernel.dma_share --threads 8 --store-gib 8 --experts "$e" --rounds 3 \
    --seconds 2 --path "$STORE" >"$OUT/dma_share-$e.txt" 2>&1 || echo "dma_share exited $?"
  cat "$OUT/dma_share-$e.txt"
done
rm -f "$STORE"
echo "done ($(( $(date +%s) - T0 )) s)"
