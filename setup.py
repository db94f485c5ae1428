"""Only here for cffi: builds the native CPU expert kernel (native._neural_native).

All project metadata lives in pyproject.toml.
"""

from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
