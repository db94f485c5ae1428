"""Only here for cffi: builds the native CPU expert kernel (native._neural_native).

All project metadata lives in pyproject.toml. NEURAL_NATIVE_PREBUILT=1 skips the cffi build and
packs a kernel built beforehand (native/_neural_native*.pyd|.so) instead: the Windows CI job
(.ci/windows-smoke.sh) cross-compiles it with MinGW-w64, as Wine has no MSVC.
"""

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithPrebuiltKernel(build_py):
    def run(self) -> None:
        super().run()
        for f in sorted(Path("native").glob("_neural_native*.pyd")) + sorted(Path("native").glob("_neural_native*.so")):
            self.copy_file(str(f), str(Path(self.build_lib) / "native" / f.name))


if os.environ.get("NEURAL_NATIVE_PREBUILT") == "1":
    setup(cmdclass={"build_py": BuildPyWithPrebuiltKernel})
else:
    setup(cffi_modules=["native/build_native.py:ffibuilder"])
