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
    assert "? The demo model stays loaded" in d.error.text()  # the reason is a sentence of its own
    assert d.sizeHint().width() <= width + 1  # the long path wraps instead of widening the dialog
    assert d.choose_folder(str(tiny_model)) and d.choice == FOLDER and d.folder == str(tiny_model)


def test_a_gguf_folder_is_refused_in_sentences(qtbot, tmp_path):
    """A folder of GGUF files (another runner's models): the reason names the format and ends before the dialog's
    advice begins (it ran on into "… are published The demo model …")."""
    d = FirstRunDialog(validate=lambda p: validate_model_dir(p)[1])
    qtbot.addWidget(d)
    (tmp_path / "gpt-oss-120b-mxfp4.gguf").write_bytes(b"GGUF")
    assert not d.choose_folder(str(tmp_path))
    assert "holds gpt-oss-120b-mxfp4.gguf and no config.json" in d.error.text()
    assert "published. The demo model stays loaded" in d.error.text()
