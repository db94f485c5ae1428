"""Application layer: CLI, settings, storage, the API server and the desktop wiring."""

import os

# torch's OpenMP workers spin after each parallel region by default; on a desktop shared with other
# programs (and next to the native expert kernel's own team) that spinning steals the cores the next
# layer needs. Measured on the demo model, 2 cores under load: decode median 65 -> 186 tok/s.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
