"""The "Get a model" page: download gpt-oss (or any hub repo), add a local folder, manage models.

Pure view: it shows what app/gui/model_page_controller.py gives it (the hub check, download and
store progress, the installed models) and emits what the user asks for. Nothing here touches
the network, the disk or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ui.qt import (
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)

OTHER = ""  # the choice key of "another repo"
STATUS_MARK = {"ok": "✔", "warn": "⚠", "fail": "✘", "info": "ℹ"}
STATUS_STYLE = {"ok": "ok", "warn": "warning", "fail": "error", "info": "hint"}


@dataclass(frozen=True)
class Choice:
    repo_id: str
    title: str
    blurb: str
    size_text: str


@dataclass(frozen=True)
class ModelRow:
    name: str
    path: str
    detail: str  # size and the store's state
    usable: bool  # complete and parses
    store_present: bool
    remove_text: str  # "Delete" for downloads, "Forget" for added folders
    resume_repo: str = ""  # an unfinished download: the repo "Resume download" continues


def _wrapping(label: QLabel, style: str = "") -> QLabel:
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wrap, never widen
    if style:
        label.setObjectName(style)
    return label


class GetModelPage(QDialog):
    checkRequested = Signal(str)  # a repo id to look up on the hub
    downloadRequested = Signal(str)
    cancelRequested = Signal()
    addFolderRequested = Signal(str)
    useRequested = Signal(str)  # a model folder
    buildStoreRequested = Signal(str)
    removeRequested = Signal(str)

    def __init__(self, choices: list[Choice], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Get a model")
        self.setMinimumSize(640, 560)
        self.resize(760, 680)
        lay = QVBoxLayout(self)

        get = QGroupBox("Download from Hugging Face")
        gl = QVBoxLayout(get)
        self.choice_buttons: dict[str, QRadioButton] = {}
        for c in choices:
            rb = QRadioButton(f"{c.title}  ·  {c.size_text}")
            rb.setToolTip(f"{c.repo_id}: {c.blurb}")
            rb.toggled.connect(lambda on, r=c.repo_id: self._chosen(r) if on else None)
            gl.addWidget(rb)
            gl.addWidget(_wrapping(QLabel(f"{c.repo_id} — {c.blurb}"), "hint"))
            self.choice_buttons[c.repo_id] = rb
        other = QHBoxLayout()
        self.other_button = QRadioButton("Another repo:")
        self.other_button.toggled.connect(lambda on: self._chosen(OTHER) if on else None)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("owner/name of a gpt-oss checkpoint (MXFP4 safetensors)")
        self.repo_edit.editingFinished.connect(self._other_edited)
        self.repo_edit.textEdited.connect(lambda _t: self.other_button.setChecked(True))
        other.addWidget(self.other_button)
        other.addWidget(self.repo_edit, 1)
        gl.addLayout(other)

        self.fit_label = _wrapping(QLabel("Choose a model to see its size and whether it fits this machine."),
                                   "hint")
        self.fit_label.setTextFormat(Qt.TextFormat.RichText)
        gl.addWidget(self.fit_label)
        row = QHBoxLayout()
        self.download_btn = QPushButton("Download")
        self.download_btn.setObjectName("primary")
        self.download_btn.setEnabled(False)
        self.download_btn.clicked.connect(lambda: self.downloadRequested.emit(self.current_repo()))
        self.cancel_btn = QPushButton("Cancel download")
        self.cancel_btn.setEnabled(False)
        self.cancel_btn.clicked.connect(self.cancelRequested.emit)
        row.addWidget(self.download_btn)
        row.addWidget(self.cancel_btn)
        row.addStretch(1)
        gl.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        gl.addWidget(self.progress)
        self.progress_label = _wrapping(QLabel(), "hint")
        gl.addWidget(self.progress_label)
        lay.addWidget(get)

        mine = QGroupBox("Your models")
        ml = QVBoxLayout(mine)
        self.models = QListWidget()
        self.models.setWordWrap(True)
        self.models.currentRowChanged.connect(lambda _r: self._update_buttons())
        ml.addWidget(self.models, 1)
        brow = QHBoxLayout()
        self.use_btn = QPushButton("Use this model")
        self.use_btn.clicked.connect(self._use_or_resume)
        self.store_btn = QPushButton("Build expert store")
        self.store_btn.clicked.connect(lambda: self._emit_selected(self.buildStoreRequested))
        self.remove_btn = QPushButton("Remove")
        self.remove_btn.clicked.connect(lambda: self._emit_selected(self.removeRequested))
        add = QPushButton("Add a local folder…")
        add.clicked.connect(self._pick_folder)
        for b in (self.use_btn, self.store_btn, self.remove_btn):
            brow.addWidget(b)
        brow.addStretch(1)
        brow.addWidget(add)
        ml.addLayout(brow)
        self.message = _wrapping(QLabel())
        ml.addWidget(self.message)
        lay.addWidget(mine, 1)
        self._rows: list[ModelRow] = []
        self._busy = False
        self._checked: str | None = None  # the repo the fit text is about
        self.fit_lines: list[tuple[str, str, str]] = []
        self._update_buttons()

    # ---- choosing ---------------------------------------------------------------------------
    def current_repo(self) -> str:
        for repo, rb in self.choice_buttons.items():
            if rb.isChecked():
                return repo
        return self.repo_edit.text().strip() if self.other_button.isChecked() else ""

    def choose(self, repo_id: str) -> None:
        """Select a catalog entry, or type ``repo_id`` as another repo (tests, the screenshot tour)."""
        if repo_id in self.choice_buttons:
            self.choice_buttons[repo_id].setChecked(True)
        else:
            self.repo_edit.setText(repo_id)
            self.other_button.setChecked(True)
            self._other_edited()

    def _chosen(self, repo: str) -> None:
        if repo == OTHER:
            repo = self.repo_edit.text().strip()
        self._request_check(repo)

    def _other_edited(self) -> None:
        if self.other_button.isChecked():
            self._request_check(self.repo_edit.text().strip())

    def _request_check(self, repo: str) -> None:
        self._checked = None
        self.download_btn.setEnabled(False)
        if not repo:
            self.fit_label.setText("Type a repo id (owner/name).")
            return
        self.fit_label.setText(f"Looking up {repo} on the hub…")
        self.checkRequested.emit(repo)

    def set_check(self, repo_id: str, size_text: str, lines: list[tuple[str, str, str]]) -> None:
        """The hub's answer for ``repo_id``: its size and (area, status, text) lines on fitting."""
        if repo_id != self.current_repo():
            return  # an answer about a choice the user already left
        self._checked = repo_id
        rows = "".join(f"<div><span style='font-weight:600'>{STATUS_MARK.get(s, '')} {a}</span>: {_esc(t)}</div>"
                       for a, s, t in lines)
        self.fit_label.setText(f"<div><b>{_esc(repo_id)}</b>: {_esc(size_text)}</div>{rows}")
        self.fit_lines = lines
        self._update_buttons()

    def set_check_error(self, repo_id: str, message: str) -> None:
        if repo_id != self.current_repo():
            return
        self._checked = None
        self.fit_label.setText(f"<span style='font-weight:600'>✘ {_esc(repo_id)}</span>: {_esc(message)}")
        self._update_buttons()

    # ---- progress ---------------------------------------------------------------------------
    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.progress.setVisible(busy)
        if busy:
            self.progress.setValue(0)
        self._update_buttons()

    def set_cancellable(self, on: bool) -> None:
        """The store build that follows a download cannot be interrupted: Cancel is off then."""
        self.cancel_btn.setEnabled(self._busy and on)

    def set_progress(self, text: str, fraction: float | None) -> None:
        """``fraction`` None: a phase of unknown length (busy bar)."""
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(max(0.0, min(1.0, fraction)) * 1000))
        self.progress_label.setText(text)

    def set_message(self, text: str, error: bool = False) -> None:
        self.message.setObjectName("error" if error else "hint")
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
        self.message.setText(text)

    # ---- the installed models ---------------------------------------------------------------
    def set_models(self, rows: list[ModelRow]) -> None:
        keep = self.selected_path()
        self._rows = list(rows)
        self.models.clear()
        for r in rows:
            item = QListWidgetItem(f"{r.name}\n{r.detail}\n{r.path}")
            item.setToolTip(r.path)
            self.models.addItem(item)
        paths = [r.path for r in rows]
        if keep in paths:
            self.models.setCurrentRow(paths.index(keep))
        elif rows:
            self.models.setCurrentRow(0)
        if not rows and not self.message.text():
            self.set_message("No models here yet: download one above, or add a model folder you already have.")
        self._update_buttons()

    def select_model(self, path: str) -> bool:
        for i, r in enumerate(self._rows):
            if r.path == path:
                self.models.setCurrentRow(i)
                return True
        return False

    def selected_path(self) -> str:
        row = self.selected_row()
        return row.path if row is not None else ""

    def selected_row(self) -> ModelRow | None:
        i = self.models.currentRow()
        return self._rows[i] if 0 <= i < len(self._rows) else None

    def _emit_selected(self, signal: Any) -> None:
        row = self.selected_row()
        if row is not None:
            signal.emit(row.path)

    def _use_or_resume(self) -> None:
        row = self.selected_row()
        if row is not None and not row.usable and row.resume_repo:
            self.downloadRequested.emit(row.resume_repo)
        else:
            self._emit_selected(self.useRequested)

    def _pick_folder(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Choose a gpt-oss model folder")
        if d:
            self.addFolderRequested.emit(d)

    def _update_buttons(self) -> None:
        row = self.selected_row()
        self.download_btn.setEnabled(not self._busy and self._checked is not None
                                     and self._checked == self.current_repo())
        self.cancel_btn.setEnabled(self._busy)
        resume = row is not None and not row.usable and bool(row.resume_repo)
        self.use_btn.setText("Resume download" if resume else "Use this model")
        self.use_btn.setEnabled(row is not None and (row.usable or (resume and not self._busy)))
        self.store_btn.setEnabled(row is not None and row.usable and not row.store_present and not self._busy)
        self.remove_btn.setEnabled(row is not None and not self._busy)
        self.remove_btn.setText(row.remove_text if row is not None else "Remove")


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
