"""Stop strings on streamed text: hold back just enough text to never emit a stop's prefix."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buf = ""
        self.hit = False

    def push(self, text: str) -> str:
        """Add streamed text; returns what is safe to emit now."""
        if not self.stops:
            return text
        self.buf += text
        cut = min((i for i in (self.buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.hit = True
            out, self.buf = self.buf[:cut], ""
            return out
        if self.hold == 0:
            out, self.buf = self.buf, ""
            return out
        safe = len(self.buf) - self.hold
        if safe <= 0:
            return ""
        out, self.buf = self.buf[:safe], self.buf[safe:]
        return out

    def flush(self) -> str:
        out, self.buf = self.buf, ""
        return out
