"""The main window at 900x600 and 1920x1080 (issue 21 point 4): nothing in the right panel is
clipped, the chat title stays, the API switch is in view, code does not soft-wrap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.types import Telemetry
from ui.api_panel import ApiPanelValues
from ui.main_window import MainWindow
from ui.qt import QApplication, QLabel, QRect, QWidget


def recorded() -> list[Telemetry]:
    samples = json.loads((Path(__file__).parent / "data" / "h200_gpu_telemetry.json").read_text())
    out = []
    for d in samples:
        d["slots"] = [tuple(s) for s in d["slots"]]
        out.append(Telemetry(**d))
    return out


def _clipped(panel_scroll) -> list[str]:
    """Visible children of the right panel cut off at the side or, for text, too small for it."""
    viewport = panel_scroll.viewport()
    out = []
    for w in panel_scroll.widget().findChildren(QWidget):
        if not w.isVisibleTo(panel_scroll.widget()) or w.width() == 0:
            continue
        top_left = w.mapTo(viewport, w.rect().topLeft())
        r = QRect(top_left, w.size())
        if r.left() < 0 or r.right() > viewport.width():
            out.append(f"{type(w).__name__} {w.objectName()!r} at x {r.left()}..{r.right()} of {viewport.width()}")
        if isinstance(w, QLabel) and w.text():
            need_w = w.minimumSizeHint().width()
            need_h = w.heightForWidth(w.width()) if w.wordWrap() else w.sizeHint().height()
            if w.width() < need_w or w.height() < need_h:
                out.append(f"label {w.text()[:30]!r}: {w.width()}x{w.height()} < {need_w}x{need_h}")
    return out


@pytest.mark.parametrize("size", [(900, 600), (1920, 1080)])
def test_right_panel_not_clipped(qtbot, size):
    w = MainWindow(api_values=ApiPanelValues(True, 8080, "sk-local-abcdefghijklmnopqrstuvwxyz", ""))
    qtbot.addWidget(w)
    w.show()
    for t in recorded():  # GPU telemetry recorded on an H200: the panel at its fullest
        w.residency.update_telemetry(t, generating=True)
    w.api_panel.set_status("Serving at http://127.0.0.1:8080/v1 — API key required", "http://127.0.0.1:8080/v1", "ok")
    w.resize(*size)
    qtbot.waitUntil(lambda: (w.width(), w.height()) == size, timeout=3000)
    for _ in range(5):
        QApplication.processEvents()
    assert not _clipped(w.right_scroll)
    assert w.chat.title.width() >= 90 and w.chat.title.isVisible()
    # the chat is not overlapped by the side panels (its own minimum fits), chat settings open too
    assert w.chat.width() >= w.chat.minimumSizeHint().width()
    w.chat.controls_btn.setChecked(True)
    QApplication.processEvents()
    assert w.chat.width() >= w.chat.minimumSizeHint().width()
    assert sum(w.splitter.sizes()) <= w.splitter.width()
    # the API switch is in view without scrolling
    sw = w.api_panel.switch
    pos = sw.mapTo(w.right_scroll.viewport(), sw.rect().bottomLeft())
    assert 0 <= pos.y() <= w.right_scroll.viewport().height()


def test_hiding_the_engine_panel_keeps_the_api_switch(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.panel_action.setChecked(False)
    assert not w.residency.isVisible() and w.api_panel.isVisible()
    w.api_action.setChecked(False)
    assert not w.right_scroll.isVisible()


def test_residency_screenshot_from_recorded_gpu_telemetry(qtbot, tmp_path):
    """The GPU view without a GPU: recorded H200 telemetry rendered to a PNG (kept as the test's
    artifact) whose slot map shows the static, adaptive and CPU colours of the theme."""
    from ui.qt import QColor
    from ui.residency_panel import ResidencyPanel
    from ui.theme import LIGHT

    p = ResidencyPanel(LIGHT)
    qtbot.addWidget(p)
    p.setFixedSize(360, 900)  # a fixed top-level size: no size-hint propagation warnings
    p.show()
    for t in recorded():
        p.update_telemetry(t, generating=True)
    QApplication.processEvents()
    img = p.grab().toImage()
    assert img.save(str(tmp_path / "residency-recorded.png"))
    m = p.slot_map
    origin = m.mapTo(p, m.rect().topLeft())
    colours = {img.pixelColor(origin.x() + x, origin.y() + y).name()
               for x in range(0, m.width(), 3) for y in range(0, m.height(), 3)}
    assert len(colours) >= 4, colours  # heat-shaded slots, not a blank or single-colour box
    assert QColor(LIGHT.slot_free).name() in colours or len(colours) > 8
    assert "%" in p.values["hit"].text() and "tok/s" in p.values["decode"].text()


def test_theme_switch_renders_code_blocks_in_the_new_colours(qtbot):
    from ui.message_view import MessageViewModel
    from ui.theme import DARK

    w = MainWindow()
    qtbot.addWidget(w)
    w.chat.append_message(MessageViewModel("a1", "assistant", content="```python\nx = 1\n```"))
    w.set_theme(DARK)
    html = w.chat.widgets[0].body.toHtml().lower()
    assert DARK.code_bg.lower() in html


def test_messages_fit_the_chat_column_of_a_narrow_window(qtbot):
    """At 900x600 a conversation with a long code line and a full footer stays inside the chat's viewport: the code
    scrolls sideways in its answer, the footer wraps, the buttons stay in view (a footer on one line had widened every
    message past the viewport, cutting off Edit and Regenerate)."""
    from ui.message_view import MessageViewModel

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    code = ("```python\ndef median(xs):\n    '''Returns the median of a list of numbers; this line is long enough to "
            "need a scrollbar in a narrow window.'''\n    return sorted(xs)[len(xs) // 2]\n```\nThe median.")
    w.chat.set_messages([
        MessageViewModel("u1", "user", "Write a Python function that returns the median of a list of numbers."),
        MessageViewModel("a1", "assistant", code, reasoning="a few words",
                         footer="1,024 tokens · 1,821.0 tok/s · prompt 13,117 (12,800 reused) · gpu-hybrid · 0.42 s")])
    w.resize(900, 600)
    qtbot.waitUntil(lambda: (w.width(), w.height()) == (900, 600), timeout=3000)
    for _ in range(5):
        QApplication.processEvents()
    vp = w.chat.scroll_area.viewport()
    assert w.chat.scroll_area.widget().width() <= vp.width()
    for mid in ("u1", "a1"):
        m = w.chat.widget_for(mid)
        assert m is not None and m.mapTo(vp, m.rect().topRight()).x() < vp.width(), mid
        for b in m.findChildren(QWidget):
            if b.isVisibleTo(m) and b.width() > 0:
                assert b.mapTo(vp, b.rect().topRight()).x() < vp.width(), (mid, type(b).__name__, b.objectName())


def test_a_long_chat_title_ends_in_an_ellipsis_and_shows_whole_on_hover(qtbot):
    """At 900x600 the title bar cut a long conversation title mid-letter with no sign that more followed: the title now
    ends in "…" and its tooltip holds the whole title; a title that fits is painted whole, with no tooltip."""
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    long_title = "Write a Python function that returns the median of a list of numbers, with tests and a docstring"
    w.chat.set_title(long_title)
    w.resize(900, 600)
    qtbot.waitUntil(lambda: (w.width(), w.height()) == (900, 600), timeout=3000)
    QApplication.processEvents()
    title = w.chat.title
    title.grab()  # paints it
    assert title.text() == long_title  # the label keeps its whole text
    assert title.shown_text().endswith("…") and long_title.startswith(title.shown_text()[:-1])
    assert title.fontMetrics().horizontalAdvance(title.shown_text()) <= title.contentsRect().width()
    assert title.toolTip() == long_title
    w.chat.set_title("Median")
    w.resize(1920, 1080)
    qtbot.waitUntil(lambda: w.width() == 1920, timeout=3000)
    QApplication.processEvents()
    title.grab()
    assert title.shown_text() == "Median" and title.toolTip() == ""


def test_an_elided_label_keeps_a_tooltip_of_its_own(qtbot):
    """The backend label sets its own tooltip (why that backend): eliding must not replace it."""
    from ui.elided_label import ElidedLabel

    lab = ElidedLabel("demo-model · demo model trained on Python stdlib code (not gpt-oss-120b; often wrong)")
    qtbot.addWidget(lab)
    lab.setToolTip("why: no CUDA device")
    lab.resize(60, 20)
    lab.show()
    lab.grab()
    assert lab.is_elided() and lab.toolTip() == "why: no CUDA device"
