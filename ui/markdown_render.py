"""Markdown to the HTML subset that QTextDocument understands.

markdown-it-py parses; fenced code is highlighted by pygments with inline styles (Qt's rich
text has no stylesheet classes worth relying on) and framed with a header row carrying the
language and a ``copy:N`` link, which the message view turns into a per-block copy button.
Raw HTML in the source is escaped, not rendered: model output is untrusted text.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from ui.theme import LIGHT, Theme

COPY_SCHEME = "copy"
# pygments builds a lexer's regexes on first use (about half a second for Python on a slow
# machine) and get_lexer_by_name searches every lexer module: both once per language, cached.
_LEXERS: dict[str, Any] = {}
_LEXERS_LOCK = threading.Lock()
COMMON_LANGUAGES = ("python", "bash", "javascript", "typescript", "json", "c", "cpp", "rust", "go", "java")


def lexer_for(lang: str) -> Any:
    """The cached lexer for ``lang`` (None when pygments has none)."""
    key = lang.lower()
    with _LEXERS_LOCK:
        if key in _LEXERS:
            return _LEXERS[key]
    try:
        lexer = get_lexer_by_name(key, stripnl=False, ensurenl=False)
        highlight("x = 1\n", lexer, HtmlFormatter(nowrap=True))  # compile its regexes now
    except ClassNotFound:
        lexer = None
    with _LEXERS_LOCK:
        _LEXERS[key] = lexer
    return lexer


def warm_up_lexers() -> threading.Thread:
    """Prepare the common languages' lexers on a background thread (at app start), so the first
    code block of an answer does not stall the GUI."""
    t = threading.Thread(target=lambda: [lexer_for(x) for x in COMMON_LANGUAGES], name="lexer-warm-up", daemon=True)
    t.start()
    return t


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)


class MarkdownRenderer:
    """Stateless per call; one instance per theme (the formatter and colours are cached)."""

    def __init__(self, theme: Theme = LIGHT) -> None:
        self.theme = theme
        self._formatter = HtmlFormatter(nowrap=True, noclasses=True, style=theme.pygments_style)
        self._md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False})
        self._md.enable(["table", "strikethrough"])
        # markdown-it binds each rule to its renderer (``function.__get__(renderer)``), so a
        # plain closure that ignores that first argument is registered per rule.
        for name, method in (("fence", self._render_fence), ("code_block", self._render_code_block),
                             ("code_inline", self._render_code_inline), ("table_open", self._render_table_open),
                             ("image", self._render_image)):
            self._md.add_render_rule(name, _as_rule(method))

    def render(self, text: str, copied: int | None = None) -> Rendered:
        """``copied`` marks one block's button as just used ("Copied")."""
        env: dict[str, Any] = {"code_blocks": [], "copied": copied}
        body = self._md.render(text, env)
        return Rendered(html=body, code_blocks=env["code_blocks"])

    # ---- render rules: (tokens, idx, options, env) -> html ------------------------------------
    def _code_html(self, code: str, lang: str, env: dict[str, Any]) -> str:
        t = self.theme
        blocks: list[str] = env["code_blocks"]
        index = len(blocks)
        blocks.append(code)
        body = self._highlight(code, lang)
        label = html.escape(lang) if lang else "code"
        button = "Copied ✓" if env.get("copied") == index else "Copy"
        # One bordered cell holds a borderless header table (language, Copy) and the code.
        return (
            f'<table width="100%" border="1" cellspacing="0" cellpadding="0" '
            f'style="border-collapse: collapse; border-style: solid; border-color: {t.border}; '
            f'margin-top: 6px; margin-bottom: 6px;">'
            f'<tr><td style="background-color:{t.code_bg};">'
            f'<table width="100%" border="0" cellspacing="0" cellpadding="4" style="background-color:{t.code_header};">'
            f'<tr><td><span style="color:{t.muted};">&nbsp;{label}</span></td>'
            f'<td align="right"><a href="{COPY_SCHEME}:{index}" style="color:{t.link}; text-decoration:none;">'
            f"{button}</a>&nbsp;</td></tr></table>"
            # padding via an inner table: a margin on <pre> inside a cell clips its last line in Qt
            f'<table width="100%" border="0" cellspacing="0" cellpadding="8"><tr><td>'
            f'<pre style="white-space: pre; font-family: monospace; margin: 0;">{body}</pre>'
            f"</td></tr></table></td></tr></table>\n"
        )

    def _highlight(self, code: str, lang: str) -> str:
        if lang:
            lexer = lexer_for(lang)
            if lexer is not None:
                out = highlight(code, lexer, self._formatter)
                return out.rstrip("\n")
        return html.escape(code.rstrip("\n"))

    def _render_fence(self, tokens: list[Any], idx: int, _options: Any, env: dict[str, Any]) -> str:
        tok = tokens[idx]
        lang = (tok.info or "").strip().split(maxsplit=1)[0] if tok.info else ""
        return self._code_html(tok.content, lang, env)

    def _render_code_block(self, tokens: list[Any], idx: int, _options: Any,
                           env: dict[str, Any]) -> str:
        return self._code_html(tokens[idx].content, "", env)

    def _render_code_inline(self, tokens: list[Any], idx: int, _options: Any,
                            _env: dict[str, Any]) -> str:
        t = self.theme
        return (f'<span style="font-family: monospace; background-color:{t.code_bg};">'
                f"{html.escape(tokens[idx].content)}</span>")

    def _render_table_open(self, _tokens: list[Any], _idx: int, _options: Any,
                           _env: dict[str, Any]) -> str:
        return (f'<table border="1" cellspacing="0" cellpadding="4" '
                f'style="border-collapse: collapse; border-color: {self.theme.border};">')

    def _render_image(self, tokens: list[Any], idx: int, _options: Any,
                      _env: dict[str, Any]) -> str:
        # Never fetch images named by model output; show the alt text as a link instead.
        tok = tokens[idx]
        src = html.escape(str(tok.attrGet("src") or ""), quote=True)
        alt = html.escape(tok.content or "image")
        return f'<a href="{src}">[{alt}]</a>'


def _as_rule(method: Any) -> Any:
    def rule(_renderer: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
        return str(method(tokens, idx, options, env))

    return rule


def plain_to_html(text: str) -> str:
    """Escaped text with line breaks kept (for reasoning and tool output)."""
    return html.escape(text).replace("\n", "<br>")
