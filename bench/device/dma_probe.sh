#!/usr/bin/env bash
# Direct DMA from the checkpoint's mapping (one device call, repo root, carry [".whl"]):
# bench.gpu.dma_probe on tmpfs (/dev/shm) and on the disk's page cache (/tmp).
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/device/env.sh
nproc; free -g | head -2; df -h /tmp /dev/shm | tail -2; uname -r
timeout 150 python3 -m bench.gpu.dma_probe /dev/shm 6 | tee "$OUT/dma-shm.json"
timeout 150 python3 -m bench.gpu.dma_probe /tmp 6 | tee "$OUT/dma-disk.json"
