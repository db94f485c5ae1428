#!/usr/bin/env bash
# Does the page size of the expert mapping matter on the H200 host? One device call (repo root, carry [".whl"]):
# 1. the machine's THP settings and mounts ($OUT/machine.txt);
# 2. bench.kernel.page_bench at 8 threads: one 4 GiB store behind tmpfs 4 KiB pages, a collapsed tmpfs copy mapped
#    2 MiB-aligned, a disk copy, anonymous memory with and without THP (DRAM probe, kernel, DMA);
# 3. bench.kernel.capture_cost at 8 threads (what copy-on-compute admission costs this host's kernel).
# Session 16 also ran a calibrated decode A B B A here (the checkpoint's tmpfs mapping against a collapsed copy
# mapped 2 MiB-aligned by a huge_pages engine setting): `git show 343ca4f:bench/device/pages.sh`. It measured no
# gain and the setting was removed (docs/perf-kernel.md).
#   usage: [BUDGET_S=580] bash bench/device/pages.sh      results: $OUT/page_bench.txt, capture_cost.txt, pages.log
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUDGET_S=${BUDGET_S:-580}
# shellcheck source=bench/device/env.sh
. bench/device/env.sh
LOG=$OUT/pages.log
{ uname -a; for f in enabled shmem_enabled defrag; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f)"; done
  mount | grep -E " / | /tmp | /dev/shm "; df -h / /tmp /dev/shm; free -g; nproc
  lscpu | grep -E "Model name|L3|NUMA node"; } >"$OUT/machine.txt" 2>&1
head -8 "$OUT/machine.txt"
echo "== page_bench ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
timeout 200 "$PY" -m bench.kernel.page_bench --threads 8 --store-gib 4 --rounds 3 --seconds 2 >"$OUT/page_bench.txt" \
  2>>"$LOG" || echo "page_bench exited $?" | tee -a "$LOG"
cat "$OUT/page_bench.txt"
if [ "$(left)" -gt 70 ]; then
  echo "== capture_cost ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
  timeout "$(( $(left) - 10 ))" "$PY" -m bench.kernel.capture_cost --threads 8 --store-gib 4 --rounds 6 \
    >"$OUT/capture_cost.txt" 2>>"$LOG" || echo "capture_cost exited $?" | tee -a "$LOG"
  cat "$OUT/capture_cost.txt"
fi
echo "done ($(( $(date +%s) - T0 )) s)" | tee -a "$LOG"
