"""The conversation sidebar: search, new chat, and rename / export / delete per conversation."""

from __future__ import annotations

from dataclasses import dataclass

from ui.qt import (
    QAbstractItemView,
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPoint,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)


@dataclass(frozen=True)
class ConversationItem:
    id: str
    title: str
    subtitle: str = ""  # e.g. "2 h ago"


class ConversationList(QWidget):
    newRequested = Signal()
    selected = Signal(str)
    renameRequested = Signal(str, str)
    deleteRequested = Signal(str)
    exportRequested = Signal(str)
    searchChanged = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 4, 8)
        lay.setSpacing(6)
        top = QHBoxLayout()
        self.new_btn = QPushButton("+ New chat")
        self.new_btn.setObjectName("primary")
        self.new_btn.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_btn.clicked.connect(self.newRequested.emit)
        top.addWidget(self.new_btn)
        lay.addLayout(top)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.searchChanged.emit)
        lay.addWidget(self.search)
        self.list = QListWidget()
        self.list.setObjectName("conversations")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setWordWrap(False)
        self.list.setUniformItemSizes(True)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemDoubleClicked.connect(lambda item: self.prompt_rename(item.data(Qt.ItemDataRole.UserRole)))
        lay.addWidget(self.list, 1)
        self._updating = False

    def set_items(self, items: list[ConversationItem], current: str | None) -> None:
        self._updating = True
        try:
            self.list.clear()
            for it in items:
                row = QListWidgetItem(it.title if not it.subtitle else f"{it.title}\n{it.subtitle}")
                row.setData(Qt.ItemDataRole.UserRole, it.id)
                row.setToolTip(it.title)
                self.list.addItem(row)
                if it.id == current:
                    self.list.setCurrentItem(row)
        finally:
            self._updating = False

    def current_id(self) -> str | None:
        item = self.list.currentItem()
        return None if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def ids(self) -> list[str]:
        return [str(self.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.list.count())]

    def _current_changed(self, cur: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if cur is not None and not self._updating:
            self.selected.emit(str(cur.data(Qt.ItemDataRole.UserRole)))

    def _title_of(self, cid: str) -> str:
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == cid:
                return item.toolTip()
        return ""

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        cid = str(item.data(Qt.ItemDataRole.UserRole))
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.prompt_rename(cid))
        menu.addAction("Export to Markdown…", lambda: self.exportRequested.emit(cid))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.confirm_delete(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def prompt_rename(self, cid: str) -> None:
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=self._title_of(cid))
        if ok and title.strip():
            self.renameRequested.emit(cid, title.strip())

    def confirm_delete(self, cid: str) -> None:
        answer = QMessageBox.question(self, "Delete conversation",
                                      f"Delete “{self._title_of(cid)}” and all its branches? This cannot be undone.")
        if answer == QMessageBox.StandardButton.Yes:
            self.deleteRequested.emit(cid)
