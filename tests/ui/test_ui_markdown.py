"""Markdown rendering: highlighted code with per-block copy links, escaped HTML, streaming-safe."""

from __future__ import annotations

from ui.markdown_render import MarkdownRenderer
from ui.qt import QTextDocument
from ui.theme import DARK, LIGHT

SAMPLE = """Here is **bold** and `inline`.

```python
def f(x):
    return x < 1
```

| a | b |
|---|---|
| 1 | 2 |

<script>alert(1)</script> ![img](http://example.com/x.png)

    indented code
"""


def test_code_blocks_highlighted_and_numbered():
    r = MarkdownRenderer(LIGHT).render(SAMPLE)
    assert r.code_blocks == ["def f(x):\n    return x < 1\n", "indented code\n"]
    assert 'href="copy:0"' in r.html and 'href="copy:1"' in r.html
    assert "<span style=" in r.html  # pygments inline styles
    assert "&lt;script&gt;" in r.html and "<script>" not in r.html
    assert "<img" not in r.html and "[img]" in r.html
    assert "<table" in r.html and "<strong>bold</strong>" in r.html
    # Qt parses it and keeps the code text intact.
    doc = QTextDocument()
    doc.setHtml(r.html)
    assert "return x < 1" in doc.toPlainText()


def test_unterminated_fence_while_streaming_and_copied_label():
    r = MarkdownRenderer(DARK).render("text\n\n```js\nconst a = 1;")
    assert r.code_blocks == ["const a = 1;"]
    assert "Copy" in r.html
    r2 = MarkdownRenderer(DARK).render("```\nx\n```", copied=0)
    assert "Copied" in r2.html


def test_unknown_language_is_plain_escaped():
    r = MarkdownRenderer().render("```nosuchlang\n<a> & b\n```")
    assert "&lt;a&gt; &amp; b" in r.html and r.code_blocks == ["<a> & b\n"]
