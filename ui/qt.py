"""The one place the Qt binding is imported.

Every module under ``ui/`` and ``app/gui/`` takes its Qt names from here, so switching the
binding (or pinning a version-specific workaround) is a one-file change.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import (
    QEvent,
    QObject,
    QPoint,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    QThread,
    QTimer,
    QUrl,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QAction,
    QBrush,
    QCloseEvent,
    QColor,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QFontMetrics,
    QGuiApplication,
    QIcon,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPalette,
    QPen,
    QResizeEvent,
    QShortcut,
    QShowEvent,
    QTextCursor,
    QTextDocument,
    QValidator,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QProgressDialog,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QSpacerItem,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QStatusBar,
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

QT_BINDING = "PySide6"


def is_alive(obj: QObject) -> bool:
    """False once Qt has deleted the C++ object behind ``obj``: a late signal (a background task's outcome) may
    still point at a widget whose window was closed and deleted."""
    import shiboken6

    return bool(shiboken6.isValid(obj))


def _guard_none_refcount() -> bool:
    """Work around PySide6 6.12's stable-ABI build returning None from void methods without a
    new reference. Where None is immortal (CPython 3.12+) that is harmless; on 3.11 every such
    call (setText, fillRect, processEvents...) takes one reference from None until the
    interpreter aborts with "none_dealloc" — minutes into a session, or mid-way through a test
    run. If a probe shows the leak, give None an effectively endless refcount, which is what
    3.12 does for it anyway. Returns whether the guard was applied."""
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    probe = QtCore.QObject()
    before = sys.getrefcount(None)
    for _ in range(64):
        probe.setObjectName("probe")  # a void method
    leaked = before - sys.getrefcount(None)
    if leaked < 32:  # other threads may move the count a little; the bug takes one per call
        return False
    ctypes.c_ssize_t.from_address(id(None)).value += 1 << 60
    return True


NONE_REFCOUNT_GUARDED = _guard_none_refcount()

__all__ = [
    "NONE_REFCOUNT_GUARDED",
    "QT_BINDING",
    "QAbstractItemView",
    "QAction",
    "QApplication",
    "QBrush",
    "QButtonGroup",
    "QCheckBox",
    "QCloseEvent",
    "QColor",
    "QComboBox",
    "QDesktopServices",
    "QDialog",
    "QDialogButtonBox",
    "QDoubleSpinBox",
    "QEvent",
    "QFileDialog",
    "QFont",
    "QFontDatabase",
    "QFontMetrics",
    "QFormLayout",
    "QFrame",
    "QGridLayout",
    "QGroupBox",
    "QGuiApplication",
    "QHBoxLayout",
    "QIcon",
    "QInputDialog",
    "QKeyEvent",
    "QKeySequence",
    "QLabel",
    "QLineEdit",
    "QListWidget",
    "QListWidgetItem",
    "QMainWindow",
    "QMenu",
    "QMessageBox",
    "QMouseEvent",
    "QObject",
    "QPaintEvent",
    "QPainter",
    "QPainterPath",
    "QPalette",
    "QPen",
    "QPlainTextEdit",
    "QPoint",
    "QPointF",
    "QProgressBar",
    "QProgressDialog",
    "QPushButton",
    "QRadioButton",
    "QRect",
    "QRectF",
    "QResizeEvent",
    "QScrollArea",
    "QShortcut",
    "QShowEvent",
    "QSize",
    "QSizePolicy",
    "QSlider",
    "QSpacerItem",
    "QSpinBox",
    "QSplitter",
    "QStackedWidget",
    "QStatusBar",
    "QTabWidget",
    "QTextBrowser",
    "QTextCursor",
    "QTextDocument",
    "QThread",
    "QTimer",
    "QToolButton",
    "QUrl",
    "QVBoxLayout",
    "QValidator",
    "QWidget",
    "Qt",
    "QtCore",
    "QtGui",
    "QtWidgets",
    "Signal",
    "Slot",
    "is_alive",
]
