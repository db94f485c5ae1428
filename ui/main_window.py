"""The main window: conversations | chat | engine panel (residency and API), plus status bar."""

from __future__ import annotations

from ui.api_panel import ApiPanel, ApiPanelValues
from ui.chat_view import ChatView
from ui.conversation_list import ConversationList
from ui.engine_status import EngineStatus
from ui.latency import freeze_long_lived
from ui.markdown_render import MarkdownRenderer, warm_up_lexers
from ui.qt import (
    QAction,
    QCloseEvent,
    QKeySequence,
    QMainWindow,
    QScrollArea,
    QShortcut,
    QSplitter,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from ui.residency_panel import ResidencyPanel
from ui.theme import LIGHT, Theme


class MainWindow(QMainWindow):
    closing = Signal()
    newChatRequested = Signal()
    stopRequested = Signal()
    preferencesRequested = Signal()
    exportRequested = Signal()
    openLogsRequested = Signal()
    getModelRequested = Signal()

    def __init__(self, theme: Theme = LIGHT, api_values: ApiPanelValues | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = theme
        self.setWindowTitle("Neural")
        self.resize(1400, 860)
        # An explicit minimum keeps the layout from resizing the window's limits on every content
        # change (which also spams "propagateSizeHints" warnings on some platform plugins).
        self.setMinimumSize(880, 560)
        self.renderer = MarkdownRenderer(theme)
        warm_up_lexers()

        self.sidebar = ConversationList()
        self.chat = ChatView(self.renderer)
        self.residency = ResidencyPanel(theme)
        self.api_panel = ApiPanel(api_values or ApiPanelValues(False, 8080, "", ""))
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(4, 8, 8, 8)
        rl.setSpacing(8)
        rl.addWidget(self.api_panel)  # first: it must not scroll away on a short window
        rl.addWidget(self.residency)
        rl.addStretch(1)
        self.right_scroll = QScrollArea()
        self.right_scroll.setWidgetResizable(True)
        self.right_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.right_scroll.setWidget(right)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self.chat)
        self.splitter.addWidget(self.right_scroll)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([250, 790, 360])
        self.sidebar.setMinimumWidth(140)
        # the splitter then takes room from the side panels, never overlapping the chat's own minimum
        self.chat.setMinimumWidth(self.chat.minimumSizeHint().width())
        # as wide as the panels' narrowest layout, so nothing in them is ever cut off at the side
        self.right_scroll.setMinimumWidth(max(280, right.minimumSizeHint().width()
                                              + self.right_scroll.verticalScrollBar().sizeHint().width() + 2))
        for i in range(3):
            self.splitter.setCollapsible(i, False)
        self.setCentralWidget(self.splitter)

        self.engine_status = EngineStatus(theme)
        self.statusBar().addWidget(self.engine_status, 1)
        self.engine_status.fixRequested.connect(self.preferencesRequested.emit)
        self._build_menu()
        self.esc_shortcut = QShortcut(QKeySequence("Esc"), self, self._escape)
        self.chat.composer.escapePressed.connect(self._escape)
        freeze_long_lived()  # start-up objects out of the GC's full scans (ui/latency.py)

    def _build_menu(self) -> None:
        m = self.menuBar().addMenu("&File")
        self.new_action = QAction("New chat", self, shortcut=QKeySequence("Ctrl+N"))
        self.new_action.triggered.connect(self.newChatRequested.emit)
        m.addAction(self.new_action)
        self.export_action = QAction("Export conversation to Markdown…", self, shortcut=QKeySequence("Ctrl+E"))
        self.export_action.triggered.connect(self.exportRequested.emit)
        m.addAction(self.export_action)
        m.addSeparator()
        self.get_model_action = QAction("Get a model…", self)
        self.get_model_action.triggered.connect(self.getModelRequested.emit)
        m.addAction(self.get_model_action)
        self.prefs_action = QAction("Preferences…", self, shortcut=QKeySequence("Ctrl+,"))
        self.prefs_action.triggered.connect(self.preferencesRequested.emit)
        m.addAction(self.prefs_action)
        m.addSeparator()
        quit_action = QAction("Quit", self, shortcut=QKeySequence("Ctrl+Q"))
        quit_action.triggered.connect(self.close)
        m.addAction(quit_action)
        v = self.menuBar().addMenu("&View")
        self.panel_action = QAction("Engine panel", self, checkable=True, checked=True)
        self.panel_action.toggled.connect(self._panels_changed)
        v.addAction(self.panel_action)
        self.api_action = QAction("API panel", self, checkable=True, checked=True)
        self.api_action.toggled.connect(self._panels_changed)
        v.addAction(self.api_action)
        h = self.menuBar().addMenu("&Help")
        logs = QAction("Open log folder", self)
        logs.triggered.connect(self.openLogsRequested.emit)
        h.addAction(logs)

    def _panels_changed(self, *_a: object) -> None:
        """The engine view and the API switch hide separately; the side column when both are hidden."""
        self.residency.setVisible(self.panel_action.isChecked())
        self.api_panel.setVisible(self.api_action.isChecked())
        self.right_scroll.setVisible(self.panel_action.isChecked() or self.api_action.isChecked())

    def set_theme(self, theme: Theme) -> None:
        """Colours used by HTML and custom painting (the palette itself is application-wide)."""
        self.theme = theme
        self.renderer = MarkdownRenderer(theme)
        self.chat.set_renderer(self.renderer)
        self.residency.set_theme(theme)
        self.engine_status.theme = theme

    def _escape(self) -> None:
        if self.chat.generating:
            self.stopRequested.emit()
        else:
            self.chat.cancel_edit()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.closing.emit()
        super().closeEvent(event)
