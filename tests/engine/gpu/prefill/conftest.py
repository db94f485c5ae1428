"""The prompt kernels run under Triton's interpreter in CI (no GPU): set it before any import."""

import os

os.environ["TRITON_INTERPRET"] = "1"
