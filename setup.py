"""Only here for cffi: builds the native CPU expert kernel (native._neural_native).

All project metadata lives in pyproject.toml. NEURAL_NATIVE_PREBUILT=1 skips the cffi build and
packs a kernel built beforehand (native/_neural_native*.pyd|.so) instead: the Windows CI job
(.ci/windows-smoke.sh) cross-compiles it with MinGW-w64, as Wine has no MSVC.
"""

import os

from setuptools import setup

if os.environ.get("NEURAL_NATIVE_PREBUILT") == "1":
    setup(package_data={"native": ["_neural_native*.pyd", "_neural_native*.so"]})
else:
    setup(cffi_modules=["native/build_native.py:ffibuilder"])
