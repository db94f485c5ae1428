"""Chat controls (issue 21 point 7): instructions, temperature, top-p, seed and length kept per
conversation and sent with each answer (to the local engine and through the remote backend);
the context meter; attachments; the unsent draft across restarts."""

from __future__ import annotations

from app.gui.remote_backend import conversation_to_openai
from engine.types import Done
from ui.qt import Qt


def _capture(c):
    seen = []
    orig = c.chat._start_run

    def spy(cid, conv, params):
        seen.append((conv, params))
        return orig(cid, conv, params)

    c.chat._start_run = spy
    return seen


def _send(qtbot, c, text: str) -> Done:
    with qtbot.waitSignal(c.chat.generationFinished, timeout=30000) as blocker:
        c.window.chat.composer.setPlainText(text)
        qtbot.keyClick(c.window.chat.composer, Qt.Key.Key_Return)
    return blocker.args[0]


def test_controls_are_sent_kept_per_conversation_and_restored(qtbot, make_app, tmp_path):
    home = tmp_path / "home"
    c = make_app(home=home)
    seen = _capture(c)
    ctl = c.window.chat.controls
    ctl.system_prompt.setPlainText("Answer in French.")
    ctl.temperature.setValue(0.25)
    ctl.top_p.setValue(0.8)
    ctl.seed.setValue(1234)
    ctl.max_tokens.setValue(5)
    done = _send(qtbot, c, "Hello")
    conv, params = seen[-1]
    assert conv.messages[0].role == "system" and conv.messages[0].content == "Answer in French."
    assert (params.temperature, params.top_p, params.seed, params.max_tokens) == (0.25, 0.8, 1234, 5)
    # the same request through the remote backend: the instructions lead the OpenAI messages
    assert conversation_to_openai(conv)[0] == {"role": "system", "content": "Answer in French."}
    # the context meter counts this conversation's tokens against the engine's context
    used = done.usage.prompt_tokens + done.usage.completion_tokens
    assert ctl.context_bar.format() == f"{used:,} of 2,048 tokens" and ctl.context_bar.value() == used
    first = c.chat.current_id

    c.chat.new_conversation()  # a new chat starts from the app's defaults
    assert ctl.system_prompt.toPlainText() == "" and ctl.seed.value() == -1
    ctl.temperature.setValue(1.5)
    _send(qtbot, c, "Second")
    assert seen[-1][1].temperature == 1.5 and seen[-1][0].messages[0].role == "user"
    c.chat.open_conversation(first)
    assert (ctl.system_prompt.toPlainText(), ctl.temperature.value(), ctl.seed.value()) == ("Answer in French.",
                                                                                          0.25, 1234)
    c.window.chat.composer.setPlainText("an unsent draft")
    c.shutdown()

    c2 = make_app(home=home)
    c2.chat.open_conversation(first)
    assert c2.window.chat.composer.toPlainText() == "an unsent draft"
    assert c2.window.chat.controls.top_p.value() == 0.8


def test_attach_files_and_a_folder(qtbot, make_app, tmp_path):
    c = make_app(wait=False, model_dir="")
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "a.py").write_text("print('a')\n")
    (proj / ".git").mkdir()
    (proj / ".git" / "HEAD").write_text("ref")
    (proj / "blob.bin").write_bytes(b"\0\1\2")
    c.chat.attach([str(proj)])
    text = c.window.chat.composer.toPlainText()
    assert "proj/src/a.py:\n```python\nprint('a')\n```" in text and "HEAD" not in text
    assert "Attached 1 file(s); skipped 1: proj/blob.bin (binary)." in c.window.chat.hint.text()
