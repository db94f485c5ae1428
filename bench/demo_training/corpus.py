"""Chat samples from the Python standard library: a user asks for a function, the assistant's
final channel answers with its code and one sentence.

Everything comes from the running interpreter's own stdlib sources, so the corpus can be built
offline on any machine; its hash and the Python version are recorded in the training log.
"""

from __future__ import annotations

import ast
import hashlib
import random
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ASKS = (
    "Write a Python function `{sig}` that {need}",
    "I need a function `{sig}`: it should {need}",
    "Can you implement `{sig}`? It must {need}",
    "Please write `{sig}` in Python. It {needs}",
)


@dataclass(frozen=True)
class Sample:
    user: str
    answer: str
    source: str  # module path, for held-out splits


def _first_sentence(doc: str) -> str:
    line = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    return line.split(". ")[0].rstrip(".")


def _need(summary: str) -> str:
    """"Return the foo" -> "return the foo": a verb phrase for the templates."""
    return summary[0].lower() + summary[1:] if summary else summary


def _third_person(phrase: str) -> str:
    """"return the foo" -> "returns the foo" (imperative docstrings -> a describing sentence)."""
    word, _, rest = phrase.partition(" ")
    if word in ("a", "an", "the", "this", "if", "when", "for", "in") or not word.isalpha():
        return "does this: " + phrase
    if word.endswith(("s", "sh", "ch", "x", "z")):
        word += "es"
    elif word.endswith("y") and len(word) > 2 and word[-2] not in "aeiou":
        word = word[:-1] + "ies"
    else:
        word += "s"
    return f"{word} {rest}".strip()


def samples_from_file(path: Path, rng: random.Random, max_lines: int = 40) -> Iterator[Sample]:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    lines = text.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or node.end_lineno is None:
            continue
        start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
        body = lines[start : node.end_lineno]
        if not 3 <= len(body) <= max_lines:
            continue
        indent = len(body[0]) - len(body[0].lstrip())
        code = "\n".join(ln[indent:] if len(ln) >= indent else ln.lstrip() for ln in body)
        summary = _first_sentence(doc)
        if len(summary) < 12:
            continue
        args = ", ".join(a.arg for a in node.args.args if a.arg != "self")
        sig = f"{node.name}({args})"
        need = _need(summary)
        ask = rng.choice(ASKS).format(sig=sig, need=need, needs=need)
        answer = f"```python\n{code}\n```\nThis function {_third_person(need)}."
        yield Sample(ask, answer, str(path))


def build_corpus(root: Path | None = None, seed: int = 0) -> tuple[list[Sample], str]:
    """All samples under the stdlib (or ``root``), in a deterministic order, and their hash."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    rng = random.Random(seed)
    files = sorted(p for p in base.rglob("*.py")
                   if "site-packages" not in p.parts and "test" not in p.parts and "tests" not in p.parts
                   and "idlelib" not in p.parts)
    out: list[Sample] = []
    for f in files:
        out.extend(samples_from_file(f, rng))
    h = hashlib.sha256()
    for s in out:
        h.update(s.user.encode())
        h.update(s.answer.encode())
    return out, h.hexdigest()[:16]


def split(samples: list[Sample], held_out: float = 0.05, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """Split by module so held-out prompts come from files the model never saw."""
    mods = sorted({s.source for s in samples})
    random.Random(seed).shuffle(mods)
    test_mods = set(mods[: max(1, int(len(mods) * held_out))])
    return [s for s in samples if s.source not in test_mods], [s for s in samples if s.source in test_mods]
