"""One app per data folder: a second instance on the same conversations and settings is warned
(issue 21 point 10) and may quit or go on. The lock is a QLockFile, released when the process
ends (a stale lock of a killed process is taken over)."""

from __future__ import annotations

from pathlib import Path

from ui.qt import QMessageBox, QtCore, QWidget


def take_lock(data_dir: Path) -> tuple[QtCore.QLockFile, int | None]:
    """(the lock, None) when this is the only instance, else (the lock, the other's pid or 0)."""
    lock = QtCore.QLockFile(str(data_dir / "neural.lock"))
    lock.setStaleLockTime(0)  # stale only when the holder's process is gone
    if lock.tryLock(200):
        return lock, None
    info = lock.getLockInfo()  # PySide6: (pid, hostname, appname)
    pid = info[0] if isinstance(info, tuple) and info and isinstance(info[0], int) else 0
    return lock, pid


def confirm_second_instance(pid: int, data_dir: Path, parent: QWidget | None = None) -> bool:
    """Ask whether to run anyway; True = go on."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Neural is already running",
                      f"Another Neural{f' (process {pid})' if pid else ''} is using this data folder:\n{data_dir}\n\n"
                      "Two copies would answer into the same conversations and each load the model "
                      "(twice the memory). Switch to the open window, or run this one anyway.", parent=parent)
    box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
    go = box.addButton("Run anyway", QMessageBox.ButtonRole.AcceptRole)
    box.exec()
    return box.clickedButton() is go
