"""First-run folder picker (issue 21 point 6): a wrong folder is explained inside the dialog,
without widening it, and not accepted; a good one is."""

from __future__ import annotations

from ui.first_run_dialog import FOLDER, FirstRunDialog
from ui.preferences_dialog import validate_model_dir


def test_wrong_folder_is_refused_with_a_wrapped_reason(qtbot, tmp_path, tiny_model):
    d = FirstRunDialog(validate=lambda p: validate_model_dir(p)[1])
    qtbot.addWidget(d)
    d.show()
    width = d.sizeHint().width()
    deep = tmp_path / ("a-very-long-folder-name-" * 8) / "still-not-a-model"
    deep.mkdir(parents=True)
    assert not d.choose_folder(str(deep))
    assert d.isVisible() and d.choice != FOLDER and d.error.isVisible()
    assert "config.json" in d.error.text() and "demo model stays loaded" in d.error.text()
    assert d.sizeHint().width() <= width + 1  # the long path wraps instead of widening the dialog
    assert d.choose_folder(str(tiny_model)) and d.choice == FOLDER and d.folder == str(tiny_model)
