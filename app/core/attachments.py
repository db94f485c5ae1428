"""Files attached to a message as context: each text file becomes a fenced block headed by its
path, so the model (and the user, who sees it in the composer) knows what it is reading.

Binary files, hidden folders and build/dependency folders are skipped; the total is capped so
an accidental attach of a big tree cannot fill the context. What was skipped is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MAX_TOTAL_BYTES = 256 * 1024  # about 64k tokens of code: beyond that the context fills up
SKIP_DIRS = {"node_modules", "__pycache__", "build", "dist", "target", "venv", ".venv", "site-packages"}
LANG = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go", ".c": "c",
        ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".java": "java", ".md": "markdown", ".json": "json",
        ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash", ".html": "html", ".css": "css"}


@dataclass
class Attached:
    text: str = ""
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path (why)"

    def summary(self) -> str:
        s = f"Attached {len(self.files)} file(s)"
        if self.skipped:
            more = "…" if len(self.skipped) > 5 else ""
            s += f"; skipped {len(self.skipped)}: " + ", ".join(self.skipped[:5]) + more
        return s + "."


def _files_under(folder: Path) -> list[Path]:
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).parts
        if any(part.startswith(".") or part in SKIP_DIRS for part in rel[:-1]) or rel[-1].startswith("."):
            continue
        if p.is_file():
            out.append(p)
    return out


def attach(paths: list[str], max_total: int = MAX_TOTAL_BYTES) -> Attached:
    """Fenced blocks for the given files, or for every text file under a given folder."""
    res = Attached()
    total = 0
    files: list[tuple[Path, Path]] = []  # (file, the base its shown path is relative to)
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            files += [(f, p.parent) for f in _files_under(p)]
        elif p.is_file():
            files.append((p, p.parent))
        else:
            res.skipped.append(f"{p.name} (not found)")
    blocks = []
    for f, base in files:
        shown = f.relative_to(base).as_posix()
        try:
            data = f.read_bytes()
        except OSError as exc:
            res.skipped.append(f"{shown} ({exc.strerror or exc})")
            continue
        if b"\0" in data[:8192]:
            res.skipped.append(f"{shown} (binary)")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            res.skipped.append(f"{shown} (not UTF-8 text)")
            continue
        if total + len(data) > max_total:
            res.skipped.append(f"{shown} (over the {max_total // 1024} KiB attachment limit)")
            continue
        total += len(data)
        fence = "````" if "```" in text else "```"
        blocks.append(f"{shown}:\n{fence}{LANG.get(f.suffix.lower(), '')}\n{text.rstrip()}\n{fence}")
        res.files.append(shown)
    res.text = "\n\n".join(blocks)
    return res
