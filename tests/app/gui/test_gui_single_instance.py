"""A second app on the same data folder is noticed (issue 21 point 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from app.gui.single_instance import take_lock


def test_second_instance_sees_the_first_and_a_dead_holder_frees_the_lock(qapp, tmp_path):
    code = ("import sys,time;from PySide6 import QtCore;l=QtCore.QLockFile(sys.argv[1]+'/neural.lock');"
            "l.setStaleLockTime(0);print(l.tryLock(200),flush=True);time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        lock, other = take_lock(tmp_path)
        assert other == holder.pid
    finally:
        holder.kill()
        holder.wait(10)
    time.sleep(0.2)
    lock, other = take_lock(tmp_path)  # the holder died without unlocking: its lock is stale
    assert other is None and lock.isLocked()
    lock.unlock()
    assert os.getpid() > 0
