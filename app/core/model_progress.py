"""Download progress: what one report says, the line the page shows, the byte meter (rate over a
sliding window, throttled reports) and the file wrapper through which huggingface_hub's
``http_get`` writes, which counts bytes and stops the transfer on cancel."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.model_hub import MIB, DownloadCancelled


@dataclass(frozen=True)
class DownloadProgress:
    phase: str  # "download" or "verify"
    file: str
    done: int  # bytes of the whole model present (download) or of this file hashed (verify)
    total: int
    rate: float  # bytes/s over the last seconds (0 until measured)
    eta_s: float | None


Progress = Callable[[DownloadProgress], None]


def progress_text(p: DownloadProgress) -> str:
    """One line for the page: what, how far, how fast, how long still."""
    from engine.plan import fmt

    if p.phase == "verify":
        return f"Checking {p.file} against the hub's hash: {fmt(p.done)} of {fmt(p.total)}"
    pct = f" ({100 * p.done / p.total:.0f} %)" if p.total else ""
    text = f"Downloading {p.file}: {fmt(p.done)} of {fmt(p.total)}{pct}"
    if p.rate > 0:
        text += f" · {p.rate / MIB:.1f} MiB/s"
    if p.eta_s is not None and p.done < p.total:
        eta = p.eta_s
        text += (f" · about {eta:.0f} s left" if eta < 90 else f" · about {eta / 60:.0f} min left" if eta < 5400
                 else f" · about {eta / 3600:.1f} h left")
    return text


class Meter:
    """Bytes of the whole model present, the rate over a sliding window, throttled reports."""

    WINDOW = 5.0
    EVERY = 0.1

    def __init__(self, total: int, done: int, report: Progress | None) -> None:
        self.total, self.done, self.report = total, done, report
        self.file = ""
        self._samples: list[tuple[float, int]] = [(time.monotonic(), done)]
        self._last = 0.0

    def add(self, n: int, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.report is None or (not force and now - self._last < self.EVERY):
            return
        self._last = now
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.WINDOW:
            self._samples.pop(0)
        t0, d0 = self._samples[0]
        rate = (self.done - d0) / (now - t0) if now > t0 and self.done > d0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else None
        self.report(DownloadProgress("download", self.file, self.done, self.total, rate, eta))


class Sink:
    """The file http_get writes to: counts bytes for the meter and stops on cancel."""

    def __init__(self, raw: Any, meter: Meter, cancel: threading.Event | None) -> None:
        self.raw, self.meter, self.cancel = raw, meter, cancel

    def write(self, data: bytes) -> int:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled("Download cancelled")
        n: int = self.raw.write(data)
        self.meter.add(len(data))
        return n

    def tell(self) -> int:
        return int(self.raw.tell())

    def seek(self, pos: int, whence: int = 0) -> int:
        return int(self.raw.seek(pos, whence))

    def truncate(self, size: int | None = None) -> int:
        # http_get truncates when a server ignored the Range header and sent the whole file again
        before = os.fstat(self.raw.fileno()).st_size
        n = int(self.raw.truncate(size))
        self.meter.add(n - before)
        return n
