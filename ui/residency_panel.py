"""Live view of what the engine holds and how fast it runs, fed from ``Engine.telemetry()``.

It shows the engine's own report, never the configuration: a CPU engine has no VRAM slots and
says so. The controller polls telemetry a few times a second on the GUI thread (the call only
copies counters) and passes each snapshot to :meth:`ResidencyPanel.update_telemetry`.
"""

from __future__ import annotations

import os
import sys
from collections import deque

from engine.types import Telemetry, Usage
from ui.qt import (
    QColor,
    QFrame,
    QGridLayout,
    QLabel,
    QPainter,
    QPaintEvent,
    QPen,
    QPointF,
    QRectF,
    QSize,
    QSizePolicy,
    Qt,
    QVBoxLayout,
    QWidget,
)
from ui.theme import LIGHT, Theme

GIB = 1024**3


def process_rss_bytes() -> int:
    """Resident memory of this process: /proc on Linux, the working set on Windows, else the peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        pass
    if sys.platform == "win32":
        return _windows_working_set()
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except (ImportError, OSError):
        return 0


def _windows_working_set() -> int:
    import ctypes
    from ctypes import wintypes

    class Counters(ctypes.Structure):
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD),
                    ("PeakWorkingSetSize", ctypes.c_size_t), ("WorkingSetSize", ctypes.c_size_t),
                    ("QuotaPeakPagedPoolUsage", ctypes.c_size_t), ("QuotaPagedPoolUsage", ctypes.c_size_t),
                    ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t), ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
                    ("PagefileUsage", ctypes.c_size_t), ("PeakPagefileUsage", ctypes.c_size_t)]

    try:
        c = Counters()
        c.cb = ctypes.sizeof(c)
        k32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        if k32.K32GetProcessMemoryInfo(k32.GetCurrentProcess(), ctypes.byref(c), c.cb):
            return int(c.WorkingSetSize)
    except (AttributeError, OSError):
        pass
    return 0


def fmt_gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB // 10 else f"{n / 1024**2:.0f} MiB"


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    t = min(max(t, 0.0), 1.0)
    return QColor(int(a.red() + (b.red() - a.red()) * t), int(a.green() + (b.green() - a.green()) * t),
                  int(a.blue() + (b.blue() - a.blue()) * t))


class SlotMap(QWidget):
    """One row per layer: its experts held in static slots, in adaptive slots, then those not in
    VRAM (computed by the CPU). Held experts are drawn brighter the more hits they recently got."""

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.slots: list[tuple[int, int, int]] = []
        self.hits: list[list[float]] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(40)

    def set_data(self, slots: list[tuple[int, int, int]], hits: list[list[float]]) -> None:
        self.slots, self.hits = list(slots), [list(h) for h in hits]
        rows = max(1, len(self.slots))
        per_row = min(18, max(5, 240 // rows))  # a few layers get tall rows, 36 layers about 7 px
        self.setFixedHeight(rows * per_row + 2)
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(260, self.height())

    def _cell_heat(self, layer: int, kind: int, index_in_layer: int, total: int) -> float:
        """0..1 brightness from recent hits, per slot if the engine reports per-slot counts."""
        if layer >= len(self.hits):
            return 0.0
        h = self.hits[layer]
        if not h:
            return 0.0
        if len(h) == total:  # per-slot counts
            peak = max(h) or 1.0
            return h[index_in_layer] / peak
        if kind < len(h):  # per-kind counts
            peak = max(h) or 1.0
            return h[kind] / peak
        return 0.0

    def paintEvent(self, _e: QPaintEvent) -> None:
        if not self.slots:
            return
        p = QPainter(self)
        t = self.theme
        base = [QColor(t.slot_static), QColor(t.slot_adaptive), QColor(t.slot_free)]
        dim = QColor(t.surface)
        cols = max(sum(s) for s in self.slots) or 1
        rows = len(self.slots)
        w, h = self.width() - 2, self.height() - 2
        cw, ch = w / cols, h / rows
        gap = 1.0 if cw > 3 and ch > 3 else 0.0
        for r, (st, ad, fr) in enumerate(self.slots):
            total = st + ad + fr
            col = 0
            for kind, n in enumerate((st, ad, fr)):
                for _ in range(n):
                    color = base[kind]
                    if kind < 2:  # cold slots are drawn faded; hot ones in full colour
                        color = _mix(dim, color, 0.35 + 0.65 * self._cell_heat(r, kind, col, total))
                    p.fillRect(QRectF(1 + col * cw, 1 + r * ch, max(cw - gap, 1.0), max(ch - gap, 1.0)), color)
                    col += 1
        p.end()


class RatePlot(QWidget):
    """Prompt and decode tokens/s over the last minute, two lines on a shared scale."""

    def __init__(self, theme: Theme = LIGHT, capacity: int = 240, parent: QWidget | None = None) -> None:
        # capacity 240 at four samples a second: the last minute of generation.
        super().__init__(parent)
        self.theme = theme
        self.decode: deque[float] = deque(maxlen=capacity)
        self.prompt: deque[float] = deque(maxlen=capacity)
        self.setFixedHeight(70)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def add(self, prompt_tps: float, decode_tps: float) -> None:
        self.prompt.append(max(prompt_tps, 0.0))
        self.decode.append(max(decode_tps, 0.0))
        self.update()

    def paintEvent(self, _e: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        t = self.theme
        r = QRectF(0.5, 0.5, self.width() - 1.0, self.height() - 1.0)
        p.fillRect(r, QColor(t.surface))
        p.setPen(QPen(QColor(t.border)))
        p.drawRect(r)
        top_d = max([*self.decode, 1.0])
        top_p = max([*self.prompt, 1.0])
        p.setPen(QColor(t.muted))
        p.drawText(r.adjusted(4, 2, -4, -2), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop),
                   f"decode ≤ {top_d:,.1f}   prompt ≤ {top_p:,.0f} tok/s")
        # The x axis spans the samples present (at least 40), so a short answer fills the plot.
        span = max(40, len(self.decode), len(self.prompt))
        plot = r.adjusted(2, 18, -2, -4)
        # Each series on its own scale: prompt rates are often 20-100x decode rates.
        for series, top, color, style in ((self.prompt, top_p, t.muted, Qt.PenStyle.DashLine),
                                          (self.decode, top_d, t.accent, Qt.PenStyle.SolidLine)):
            if len(series) < 2:
                continue
            pen = QPen(QColor(color))
            pen.setWidthF(1.6)
            pen.setStyle(style)
            p.setPen(pen)
            n = len(series)
            p.drawPolyline([QPointF(plot.right() - (n - 1 - i) * plot.width() / (span - 1),
                                    plot.bottom() - (v / top) * plot.height()) for i, v in enumerate(series)])
        p.end()


class PhaseBars(QWidget):
    """Time per token by phase: one labelled bar each, as a share of the per-token total."""

    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.phases: list[tuple[str, float]] = []
        self.total = 0.0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_phases(self, phases_ms: dict[str, float]) -> None:
        items = dict(phases_ms)
        # Engines may report the whole token next to its parts; that is the total, not a phase.
        total = items.pop("token", None) or items.pop("total", None) or sum(items.values())
        self.total = float(total)
        self.phases = sorted(items.items(), key=lambda kv: -kv[1])
        self.setFixedHeight(18 * len(self.phases) + 4)
        self.update()

    def paintEvent(self, _e: QPaintEvent) -> None:
        if not self.phases:
            return
        p = QPainter(self)
        t = self.theme
        fm = self.fontMetrics()
        name_w = max(fm.horizontalAdvance(n) for n, _ in self.phases) + 8
        val_w = fm.horizontalAdvance("00,000.0 ms") + 8
        bar_w = max(10, self.width() - name_w - val_w - 4)
        top = max(self.total, max(v for _, v in self.phases), 1e-9)
        for i, (name, ms) in enumerate(self.phases):
            y = 2 + i * 18
            p.setPen(QColor(t.text))
            p.drawText(QRectF(0, y, name_w, 16), int(Qt.AlignmentFlag.AlignVCenter), name)
            p.drawText(QRectF(name_w, y, val_w - 8, 16),
                       int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight), f"{ms:,.1f} ms")
            x0 = name_w + val_w
            p.fillRect(QRectF(x0, y + 3, bar_w, 10), QColor(t.slot_free))
            p.fillRect(QRectF(x0, y + 3, max(1.0, bar_w * ms / top), 10), QColor(t.accent))
        p.end()


class ResidencyPanel(QFrame):
    def __init__(self, theme: Theme = LIGHT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.setObjectName("card")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.setSpacing(6)
        head = QLabel("Engine")
        head.setObjectName("heading")
        lay.addWidget(head)
        self.model_label = QLabel("No model")
        self.model_label.setWordWrap(True)
        lay.addWidget(self.model_label)
        self.note_label = QLabel()
        self.note_label.setObjectName("warning")
        self.note_label.setWordWrap(True)
        lay.addWidget(self.note_label)
        self.backend_note = QLabel()  # why a faster backend was not used, as the engine said it
        self.backend_note.setObjectName("muted")
        self.backend_note.setWordWrap(True)
        self.backend_note.setVisible(False)
        lay.addWidget(self.backend_note)

        sec = QLabel("VRAM expert slots")
        sec.setObjectName("heading")
        lay.addWidget(sec)
        self.no_slots_label = QLabel()
        self.no_slots_label.setObjectName("muted")
        self.no_slots_label.setWordWrap(True)
        lay.addWidget(self.no_slots_label)
        self.slot_map = SlotMap(theme)
        lay.addWidget(self.slot_map)
        self.legend = QLabel(self._legend_html())
        self.legend.setObjectName("muted")
        lay.addWidget(self.legend)

        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(2)
        self.values: dict[str, QLabel] = {}
        for row, (key, title) in enumerate((("hit", "VRAM hit rate"), ("held", "Experts in VRAM"), ("prompt", "Prompt"),
                                             ("decode", "Decode"), ("vram", "VRAM in use"), ("ram", "RAM in use"))):
            name = QLabel(title)
            name.setObjectName("muted")
            val = QLabel("—")
            val.setAlignment(Qt.AlignmentFlag.AlignRight)
            grid.addWidget(name, row, 0)
            grid.addWidget(val, row, 1)
            self.values[key] = val
        lay.addLayout(grid)
        plot_title = QLabel("Tokens/s over time (solid: decode, dashed: prompt)")
        plot_title.setObjectName("muted")
        lay.addWidget(plot_title)
        self.plot = RatePlot(theme)
        lay.addWidget(self.plot)
        self.ram_title = QLabel("Expert bytes in RAM")
        self.ram_title.setObjectName("heading")
        lay.addWidget(self.ram_title)
        self.ram_label = QLabel()
        self.ram_label.setWordWrap(True)
        self.ram_label.setObjectName("muted")
        lay.addWidget(self.ram_label)
        sec2 = QLabel("Last request")
        sec2.setObjectName("heading")
        lay.addWidget(sec2)
        self.last_label = QLabel("—")
        self.last_label.setWordWrap(True)
        self.last_label.setObjectName("muted")
        lay.addWidget(self.last_label)
        self.phases_title = QLabel()
        self.phases_title.setObjectName("muted")
        lay.addWidget(self.phases_title)
        self.phases = PhaseBars(theme)
        lay.addWidget(self.phases)
        lay.addStretch(1)
        # Every text wraps: a narrow window (900 px) must not clip "0.37 GiB (process…)" (issue 21).
        for label in self.findChildren(QLabel):
            label.setWordWrap(True)
            label.setMinimumWidth(0)
        self.last_usage: Usage | None = None
        self.snapshots = 0
        self._prev_hits: list[list[float]] = []
        self._recent: list[list[float]] = []

    def _recent_hits(self, cumulative: list[list[float]], decay: float = 0.7) -> list[list[float]]:
        """Engines report hit counters since load; the map shows what changed lately (decaying sum)."""
        cur = [list(map(float, row)) for row in cumulative]
        if not self._prev_hits or [len(r) for r in self._prev_hits] != [len(r) for r in cur]:
            self._prev_hits, self._recent = cur, [[0.0] * len(r) for r in cur]
            return [list(r) for r in cur]  # first snapshot: show the totals so far
        for i, (now, before) in enumerate(zip(cur, self._prev_hits, strict=True)):
            self._recent[i] = [decay * r + max(a - b, 0.0) for r, a, b in zip(self._recent[i], now, before,
                                                                                strict=True)]
        self._prev_hits = cur
        return [list(r) for r in self._recent]

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.slot_map.theme = theme
        self.plot.theme = theme
        self.phases.theme = theme
        self.legend.setText(self._legend_html())
        self.update()

    def _legend_html(self) -> str:
        t = self.theme
        return (f'<span style="color:{t.slot_static}">■</span> static slot &nbsp; '
                f'<span style="color:{t.slot_adaptive}">■</span> adaptive slot &nbsp; '
                f'<span style="color:{t.slot_free}">■</span> not in VRAM (CPU)<br>'
                f"one row per layer; brighter = more hits in the last seconds")

    def update_telemetry(self, t: Telemetry | None, generating: bool = False) -> None:
        self.snapshots += 1
        if t is None:
            self.model_label.setText("No model loaded")
            self.note_label.setVisible(False)
            self.no_slots_label.setText("—")
            self.slot_map.setVisible(False)
            self.legend.setVisible(False)
            return
        self.model_label.setText(f"<b>{t.model_name or 'model'}</b> · {t.backend} · {t.state}")
        self.note_label.setText(t.model_note)
        self.note_label.setVisible(bool(t.model_note))
        has_slots = bool(t.slots)
        self.slot_map.setVisible(has_slots)
        self.legend.setVisible(has_slots)
        self.no_slots_label.setVisible(not has_slots)
        if has_slots:
            self.slot_map.set_data(t.slots, self._recent_hits(t.slot_hits))
            st = sum(s[0] for s in t.slots)
            ad = sum(s[1] for s in t.slots)
            fr = sum(s[2] for s in t.slots)
            self.values["hit"].setText(f"{t.vram_hit_rate * 100:.1f} %")
            self.values["held"].setText(f"{st} static + {ad} adaptive; {fr} on CPU")
        else:
            self.no_slots_label.setText(
                f"CPU engine — no VRAM slots. All {t.layers * t.experts_per_layer} experts "
                f"({t.layers} layers × {t.experts_per_layer}) are computed on the CPU from RAM.")
            self.values["hit"].setText("— (no GPU)")
            self.values["held"].setText("none")
        self.values["prompt"].setText(f"{t.prompt_tps:,.1f} tok/s")
        self.values["decode"].setText(f"{t.decode_tps:,.1f} tok/s")
        if t.vram_used_bytes or t.vram_reserved_bytes:
            self.values["vram"].setText(f"{fmt_gib(t.vram_used_bytes)} (reserved {fmt_gib(t.vram_reserved_bytes)})")
        else:
            self.values["vram"].setText("none")
        ram = t.ram_used_bytes
        self.values["ram"].setText(fmt_gib(ram) if ram else f"{fmt_gib(process_rss_bytes())} (process)")
        if generating:
            self.plot.add(t.prompt_tps, t.decode_tps)
            if self.last_usage is None:
                self.last_label.setText("In progress…")
        self._update_ram_residency(t)
        if t.phases_ms:
            self.phases.set_phases(t.phases_ms)
            self.phases_title.setText(f"Time per token: {self.phases.total:,.1f} ms, by phase")
        self.phases.setVisible(bool(t.phases_ms))
        self.phases_title.setVisible(bool(t.phases_ms))

    def _update_ram_residency(self, t: Telemetry) -> None:
        """The CPU side: how much of the expert store is in RAM, locked, warming up, faulting."""
        lines = []
        if t.store_bytes:
            frac = t.store_resident_bytes / t.store_bytes
            lines.append(f"resident {fmt_gib(t.store_resident_bytes)} of {fmt_gib(t.store_bytes)} ({frac * 100:.0f} %)")
        if t.ram_locked_bytes or t.ram_budget_bytes:
            lines.append(f"RAM budget {fmt_gib(t.ram_budget_bytes)}, locked (mlock) {fmt_gib(t.ram_locked_bytes)}")
        if t.warmup_state:
            lines.append(f"warm-up: {t.warmup_state} ({t.warmup_fraction * 100:.0f} %)")
        if t.faults_major_per_token or t.faults_minor_per_token:
            lines.append(f"page faults per token: {t.faults_major_per_token:.1f} major, "
                         f"{t.faults_minor_per_token:.1f} minor")
        if t.residency_note:
            lines.append(t.residency_note)
        self.ram_label.setText("<br>".join(lines))
        self.ram_title.setVisible(bool(lines))
        self.ram_label.setVisible(bool(lines))

    def set_backend_note(self, note: str) -> None:
        self.backend_note.setText(note)
        self.backend_note.setVisible(bool(note))

    def set_last_usage(self, u: Usage) -> None:
        self.last_usage = u
        if u.decode_tps > 0:
            # the answer's own averages close the series: samples taken while it ran miss its last stretch (an
            # answer shorter than the refresh interval got one early sample), so the plot ended below the
            # Decode figure shown beside it
            self.plot.add(u.prompt_tps, u.decode_tps)
        fresh = u.prompt_tokens - u.cached_tokens
        self.last_label.setText(
            f"Prompt: {u.prompt_tokens} tokens ({u.cached_tokens} reused from cache, {fresh} processed) "
            f"in {u.prompt_seconds:.2f} s · {u.prompt_tps:,.0f} tok/s<br>"
            f"Answer: {u.completion_tokens} tokens in {u.decode_seconds:.2f} s · {u.decode_tps:,.1f} tok/s")
