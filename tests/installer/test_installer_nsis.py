"""installer/neural.nsi compiles with makensis (when installed) against a bundle layout, refuses
a folder that is not a bundle, and installs per user with an HKCU uninstall entry."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NSI = ROOT / "installer" / "neural.nsi"
MAKENSIS = shutil.which("makensis")
needs_makensis = pytest.mark.skipif(MAKENSIS is None, reason="makensis not installed (apt install nsis)")


def fake_bundle(root: Path) -> Path:
    """The layout PyInstaller produces (dist/neural), with tiny stand-in files."""
    b = root / "neural"
    demo = b / "_internal" / "resources" / "demo-model"
    demo.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (demo / name).write_text("{}")
    (b / "_internal" / "native").mkdir()
    (b / "_internal" / "native" / "_neural_native.pyd").write_bytes(b"MZ stand-in")
    for exe in ("neural.exe", "NeuralApp.exe"):
        (b / exe).write_bytes(b"MZ stand-in")
    return b


def makensis(*defines: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert MAKENSIS is not None
    return subprocess.run([MAKENSIS, "-NOCD", "-V2", *defines, str(NSI)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


@needs_makensis
def test_compiles_a_windows_installer_from_a_bundle(tmp_path):
    bundle = fake_bundle(tmp_path)
    out = tmp_path / "Neural-Setup-test.exe"
    res = makensis(f"-DBUNDLE_DIR={bundle}", f"-DOUT_FILE={out}", "-DVERSION=1.2.3", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    data = out.read_bytes()
    assert data[:2] == b"MZ" and len(data) > 30_000  # a PE executable with the payload


@needs_makensis
def test_relative_bundle_dir_is_taken_from_the_working_directory(tmp_path):
    fake_bundle(tmp_path / "dist")
    res = makensis("-DBUNDLE_DIR=dist/neural", "-DOUT_FILE=dist/setup.exe", "-DCOMPRESSOR=none", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "dist" / "setup.exe").is_file()


@needs_makensis
def test_refuses_a_folder_that_is_not_a_bundle(tmp_path):
    (tmp_path / "empty").mkdir()
    res = makensis(f"-DBUNDLE_DIR={tmp_path / 'empty'}", f"-DOUT_FILE={tmp_path / 'x.exe'}", cwd=tmp_path)
    assert res.returncode != 0
    assert "is not a Neural bundle" in res.stdout + res.stderr
    assert not (tmp_path / "x.exe").exists()


def test_script_installs_per_user_without_admin_rights():
    text = NSI.read_text()
    assert re.search(r"^RequestExecutionLevel user$", text, re.M)
    assert 'InstallDir "$LOCALAPPDATA\\Programs\\${APP_NAME}"' in text
    # shortcuts, uninstaller and its registry entry, all per user
    assert "$SMPROGRAMS\\${APP_NAME}\\${APP_NAME}.lnk" in text and "$DESKTOP\\${APP_NAME}.lnk" in text
    assert 'WriteUninstaller "$INSTDIR\\Uninstall.exe"' in text
    assert "HKLM" not in text and 'WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString"' in text
    assert "SetShellVarContext current" in text
    # the uninstaller removes only what was installed, never the user's data folder
    assert 'RMDir /r "$INSTDIR"' not in text and "$LOCALAPPDATA\\Neural" not in text.split('Section "Uninstall"')[1]
