#!/usr/bin/env bash
# The one device call for the RAM-residency benchmark (issue 10): wheels carried in .whl/
# (cffi, pycparser, platformdirs), the native CPU expert kernel built in place, then
# `bench_residency suite` inside a hard time limit. Prints the results table LAST.
# Usage (device tool, repo root, carry [".whl"], timeout_s 250):
#   bash bench/device/residency.sh [suite options, e.g. --layers 4]
# Environment: RES_TOTAL_S (default 235) = wall seconds for this whole script.
# Results in $OUT (at most 5 files): residency.json, residency.md, suite.log, machine.txt, native_build.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/neural-res-out}
mkdir -p "$OUT"
TOTAL=${RES_TOTAL_S:-235}
. bench/device/env.sh  # wheels, PYTHONPATH, native kernel
{ nvidia-smi; lscpu | head -20; free -g; df -h / /root /tmp /var/tmp /dev/shm; grep -E ' / | /root | /tmp ' /proc/mounts; \
  uname -r; cat /sys/kernel/mm/transparent_hugepage/enabled; ulimit -l; \
  for f in /sys/block/*/queue/read_ahead_kb; do echo "$f $(cat "$f")"; done; sysctl vm.dirty_ratio vm.dirty_background_ratio; \
  } >"$OUT/machine.txt" 2>&1
LEFT=$(( TOTAL - SECONDS ))
echo "setup took ${SECONDS} s; suite budget $(( LEFT - 10 )) s"
# The suite keeps its own deadline (budget); timeout is the backstop (its children die with their groups).
# Its progress lines go to stderr (here); children's stderr goes to $OUT/suite.log.
timeout -k 5 "$LEFT" $PY -m bench.residency.cli suite --out "$OUT" --budget-s "$(( LEFT - 10 ))" "$@" \
  >/dev/null
RC=$?
if [ "$RC" != 0 ]; then echo "---- suite exit $RC; last lines of suite.log:"; tail -n 30 "$OUT/suite.log" 2>/dev/null; fi
echo "---- done after ${SECONDS} s"
# the table last (rewritten after every step, so it exists even if the suite was killed)
cat "$OUT/residency.md" 2>/dev/null || echo "no residency.md"
exit $RC
