"""Light and dark themes that follow the system colour scheme.

The palette drives the Fusion style (identical on every platform) and the few colours that
HTML rendering and custom painting need: chat bubbles, code blocks and the residency map.
"""

from __future__ import annotations

from dataclasses import dataclass

from ui.qt import QApplication, QColor, QGuiApplication, QPalette, Qt


@dataclass(frozen=True)
class Theme:
    name: str
    dark: bool
    window: str
    surface: str  # panels and cards
    text: str
    muted: str
    accent: str
    accent_text: str
    border: str
    user_bubble: str
    assistant_bubble: str
    code_bg: str
    code_header: str
    link: str
    error: str
    warning: str
    ok: str
    pygments_style: str
    # residency map: static / adaptive / free slots (hits brighten the first two)
    slot_static: str
    slot_adaptive: str
    slot_free: str


LIGHT = Theme(
    name="light", dark=False,
    window="#f4f5f7", surface="#ffffff", text="#1d1f23", muted="#6a717d", accent="#2f6fde",
    accent_text="#ffffff", border="#d9dce1", user_bubble="#e7effc", assistant_bubble="#ffffff",
    code_bg="#f6f8fa", code_header="#e8ebef", link="#2f6fde", error="#c62828", warning="#a05a00",
    ok="#2e7d32", pygments_style="default",
    slot_static="#2f6fde", slot_adaptive="#2e9e5b", slot_free="#d3d7dd",
)

DARK = Theme(
    name="dark", dark=True,
    window="#1b1d21", surface="#24272c", text="#e6e8eb", muted="#9aa1ab", accent="#5b9bff",
    accent_text="#0e1117", border="#3a3e45", user_bubble="#2b3a52", assistant_bubble="#24272c",
    code_bg="#16181c", code_header="#2c3036", link="#7fb0ff", error="#ff6b6b", warning="#ffb74d",
    ok="#66bb6a", pygments_style="github-dark",
    slot_static="#5b9bff", slot_adaptive="#4cc38a", slot_free="#3a3e45",
)


# The platform's own palette, kept before the app first sets its theme palette: judging "the
# system" by the current palette would read our Dark palette back ("Follow the system" after Dark
# stayed dark until a restart).
_platform_palette: list[QPalette] = []


def system_prefers_dark() -> bool:
    app = QGuiApplication.instance()
    if app is None:
        return False
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    # Unknown (e.g. offscreen or an old desktop): judge by the platform's window colour.
    pal = _platform_palette[0] if _platform_palette else QGuiApplication.palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def resolve(preference: str) -> Theme:
    """``preference`` is "system", "light" or "dark"."""
    if preference == "dark":
        return DARK
    if preference == "light":
        return LIGHT
    return DARK if system_prefers_dark() else LIGHT


def build_palette(t: Theme) -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    p.setColor(role.Window, QColor(t.window))
    p.setColor(role.WindowText, QColor(t.text))
    p.setColor(role.Base, QColor(t.surface))
    p.setColor(role.AlternateBase, QColor(t.window))
    p.setColor(role.Text, QColor(t.text))
    p.setColor(role.Button, QColor(t.surface))
    p.setColor(role.ButtonText, QColor(t.text))
    p.setColor(role.Highlight, QColor(t.accent))
    p.setColor(role.HighlightedText, QColor(t.accent_text))
    p.setColor(role.ToolTipBase, QColor(t.surface))
    p.setColor(role.ToolTipText, QColor(t.text))
    p.setColor(role.PlaceholderText, QColor(t.muted))
    p.setColor(role.Link, QColor(t.link))
    p.setColor(role.Mid, QColor(t.border))
    p.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor(t.muted))
    p.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor(t.muted))
    p.setColor(QPalette.ColorGroup.Disabled, role.WindowText, QColor(t.muted))
    return p


def stylesheet(t: Theme) -> str:
    return f"""
QMainWindow, QDialog {{ background: {t.window}; }}
QFrame#card {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px; }}
QFrame#userBubble {{ background: {t.user_bubble}; border: 1px solid {t.border}; border-radius: 10px; }}
QFrame#assistantBubble {{ background: {t.assistant_bubble}; border: 1px solid {t.border}; border-radius: 10px; }}
QFrame#banner {{ background: {t.code_header}; border: 1px solid {t.border}; border-radius: 6px; }}
QLabel#muted, QLabel#hint {{ color: {t.muted}; }}
QLabel#error {{ color: {t.error}; }}
QLabel#warning {{ color: {t.warning}; }}
QLabel#ok {{ color: {t.ok}; }}
QLabel#heading {{ font-weight: 600; }}
QLabel#roleLabel {{ font-weight: 600; }}
QPushButton#primary {{ background: {t.accent}; color: {t.accent_text}; border: none; border-radius: 6px;
    padding: 6px 16px; font-weight: 600; }}
QPushButton#primary:disabled {{ background: {t.border}; color: {t.muted}; }}
QPushButton#danger {{ background: {t.error}; color: #ffffff; border: none; border-radius: 6px;
    padding: 6px 16px; font-weight: 600; }}
QToolButton#link {{ border: none; color: {t.link}; padding: 0 4px; }}
QToolButton#link:hover {{ text-decoration: underline; }}
QToolButton#link:disabled {{ color: {t.muted}; }}
QPlainTextEdit#composer {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px;
    padding: 6px; }}
QListWidget#conversations {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 6px; }}
QListWidget#conversations::item {{ padding: 6px 4px; }}
QListWidget#conversations::item:selected {{ background: {t.accent}; color: {t.accent_text}; border-radius: 4px; }}
QTextBrowser {{ background: transparent; border: none; }}
QWidget#reasoning {{ border-left: 3px solid {t.border}; padding-left: 6px; }}
QWidget#reasoning QTextBrowser {{ color: {t.muted}; font-style: italic; }}
QScrollArea {{ border: none; background: transparent; }}
QTextBrowser QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 0; border: none; }}
QTextBrowser QScrollBar::handle:horizontal {{ background: {t.border}; border-radius: 4px; min-width: 32px;
    margin: 2px 0; }}
QTextBrowser QScrollBar::add-line:horizontal, QTextBrowser QScrollBar::sub-line:horizontal {{ width: 0; border: none;
    background: none; }}
QTextBrowser QScrollBar::add-page:horizontal, QTextBrowser QScrollBar::sub-page:horizontal {{ background: none; }}
"""


def apply(app: QApplication, t: Theme) -> None:
    if not _platform_palette:
        _platform_palette.append(QPalette(app.palette()))
    app.setStyle("Fusion")
    app.setPalette(build_palette(t))
    app.setStyleSheet(stylesheet(t))
