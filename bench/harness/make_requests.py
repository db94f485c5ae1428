"""Rebuild the shipped replay request set: a ~13k-token coding conversation and three follow-ups.

    python -m bench.harness.make_requests            # writes bench/data/coding-13k.jsonl

A user pastes six modules of the Python 3.11.7 standard library (fnmatch, glob, genericpath,
posixpath, stat, filecmp; read from the running interpreter's stdlib folder) and asks for a refactor
into one typed package; each follow-up adds the previous assistant answer and a new user turn,
the way a chat client re-sends a growing conversation. The assistant turns are fixed text
written for this set. Output is byte-for-byte deterministic: the module sources are checked
against their sha256 so a different Python version cannot silently change the prompt.

Token counts: estimated at 4 characters per token here, where no o200k tokenizer is
available offline (~13.5k for the first request, ~15.1k for the last), and MEASURED with
tiktoken 0.14's o200k_base on the GPU machine, message contents only: 13,538 / 14,076 /
14,752 / 15,141. Harmony framing adds a few tokens per message; the last request with its
512-token answer still fits the default 16,384-token context.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

OUT_DEFAULT = Path(__file__).resolve().parents[1] / "data" / "coding-13k.jsonl"
CHARS_PER_TOKEN = 4  # the stated estimate; see the module docstring
MODEL = "gpt-oss-120b"

# stdlib sources of CPython 3.11.7, pinned by content
MODULES: dict[str, str] = {
    "fnmatch.py": "6683da36e47af523f3f41e18ad244d837783e19e98911cc0b7415dea81494ebc",
    "glob.py": "fa579f8a50a66313d34d339f10be0821c9b4fed6207e8ba8e29ed1c5e119f740",
    "genericpath.py": "9d58ad64056a89f12258a62596c2073cd9e52b459dde152f710edc0cffcd865b",
    "posixpath.py": "115bb3d2051318ee3d951cdb13c60f118f15cea837cb69fb52cf543c12fe25c3",
    "stat.py": "052af0327eae6941b69b05c088b3e748f79995635f80ac4cc7125eb333eb4c77",
    "filecmp.py": "178f19895fdd43d5d3865b2bfe9ae7b665611a30d29cfc23d44f01417774851c",
}

SYSTEM = (
    "You are a senior Python engineer doing a careful refactoring with a colleague. Keep behaviour "
    "identical unless asked otherwise, point out risky edge cases, prefer small typed functions, and "
    "show complete code when you write code. Target Python 3.11."
)

INTRO = """\
We vendor a handful of path and file utility modules from CPython 3.11 in our build tool, and \
over the years people patched them in place. I want to replace the copies with one small typed \
package, `fsutil`, that we own properly. Here are the six modules exactly as they are in our tree \
(they are still identical to 3.11.7).

Goals:
- one package `fsutil` with modules `match` (fnmatch + the glob magic helpers), `glob`, `paths` \
(the parts of genericpath/posixpath we use: join, split, splitext, normpath, commonpath, exists, \
isdir, getmtime; `stat` is there because genericpath needs it) and `compare` (filecmp);
- full type hints, `from __future__ import annotations`, no `os.path` aliasing tricks;
- keep results identical to the stdlib for the same inputs (we have golden tests);
- `dir_fd` support in glob can go, we never use it; `include_hidden` must stay;
- POSIX only, we do not ship on Windows.

"""

OUTRO = """\
Before any code: give me a plan. Which functions move where, what the public API of each module \
looks like, which private helpers disappear, and the behavioural traps you see (caching in fnmatch \
and filecmp, bytes vs str paths, recursive `**`, hidden files, symlinks in dircmp). Keep it short; \
we will write the modules one by one afterwards."""

ASSISTANT_PLAN = """\
Plan for `fsutil`:

1. `fsutil/match.py` - `translate(pat) -> str`, `fnmatchcase(name, pat) -> bool`, `fnmatch(name, pat)` \
(POSIX: same as fnmatchcase, since normcase is the identity), `filter(names, pat) -> list`. One \
`functools.lru_cache(maxsize=32768)` on the compiled pattern, keyed by the pattern only; str and bytes \
patterns stay separate cache entries because the key includes the type. Also `has_magic`, \
`is_recursive` and `escape` from glob, since they are pattern logic.
2. `fsutil/glob.py` - `glob`, `iglob` with `root_dir`, `recursive` and `include_hidden`; `dir_fd` \
removed. The private `_glob0/_glob1/_glob2` become `_literal`, `_wildcard` and `_recursive`, each a \
generator over `os.scandir` entries.
3. `fsutil/paths.py` - thin typed versions of `join`, `split`, `splitext`, `normpath`, `commonpath`, \
plus `exists`, `isdir`, `getmtime`. These re-export the posixpath logic verbatim, only annotated.
4. `fsutil/compare.py` - `cmp(a, b, shallow=True)`, `cmpfiles`, and a `DirComparison` dataclass built \
eagerly instead of `dircmp`'s lazy `__getattr__` phases.

Traps:
- `fnmatch.translate` output must stay byte-identical, or cached regexes in our config break.
- `filecmp` caches results by (path, path, signature); a refactor must keep the signature check or \
stale results come back after a file is rewritten within the same second on coarse-mtime filesystems.
- `glob('**')` with `recursive=False` behaves like `*`; hidden files are skipped unless the pattern \
segment starts with a dot or `include_hidden=True`.
- bytes paths: every helper must keep accepting bytes and return bytes.
- `dircmp` follows symlinks via `os.stat`; broken links end up in `common_funny`.

Next step, if you agree: `fsutil/match.py` in full."""

USER_MATCH = """\
The plan looks right. Write `fsutil/match.py` in full: translate, fnmatchcase, fnmatch, filter, \
has_magic, is_recursive and escape, with type hints and docstrings. Keep the regex text identical to \
`fnmatch.translate` for every pattern, including `[!...]` sets and unbalanced brackets."""

ASSISTANT_MATCH = '''\
```python
"""Shell-style pattern matching (POSIX): fnmatch plus the glob magic helpers."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import AnyStr

_MAGIC = re.compile("([*?[])")
_MAGIC_BYTES = re.compile(b"([*?[])")


@functools.lru_cache(maxsize=32768, typed=True)
def _compiled(pat: AnyStr) -> re.Pattern[AnyStr]:
    if isinstance(pat, bytes):
        regex = translate(pat.decode("latin-1")).encode("latin-1")
        return re.compile(regex)  # type: ignore[return-value]
    return re.compile(translate(pat))  # type: ignore[return-value]


def fnmatchcase(name: AnyStr, pat: AnyStr) -> bool:
    """True when NAME matches PAT; case is significant."""
    return _compiled(pat).match(name) is not None


def fnmatch(name: AnyStr, pat: AnyStr) -> bool:
    """On POSIX normcase is the identity, so this is fnmatchcase."""
    return fnmatchcase(name, pat)


def filter(names: Iterable[AnyStr], pat: AnyStr) -> list[AnyStr]:  # noqa: A001 - stdlib name
    match = _compiled(pat).match
    return [n for n in names if match(n)]


def has_magic(s: AnyStr) -> bool:
    magic = _MAGIC_BYTES if isinstance(s, bytes) else _MAGIC
    return magic.search(s) is not None  # type: ignore[arg-type]


def is_recursive(pattern: AnyStr) -> bool:
    return pattern == (b"**" if isinstance(pattern, bytes) else "**")


def escape(pathname: AnyStr) -> AnyStr:
    """Escape all special characters (the drive is empty on POSIX)."""
    if isinstance(pathname, bytes):
        return _MAGIC_BYTES.sub(rb"[\\1]", pathname)
    return _MAGIC.sub(r"[\\1]", pathname)
```

`translate` stays a verbatim port of the 3.11 algorithm (the two-pass version that collapses \
consecutive `*` and builds the `(?>...)`-free atomic groups with lookaheads), so its output is \
identical; I left it out above only to keep this message readable - paste the stdlib body under a \
typed signature `def translate(pat: str) -> str`.'''

USER_FAILURE = """\
I pasted the stdlib `translate` body in as you said. One golden test fails:

```
___________________________ test_filter_bytes_cache ___________________________

    def test_filter_bytes_cache():
        names = [b"a.py", b"b.txt", "c.py"]
>       assert match.filter(names[:2], b"*.py") == [b"a.py"]
E       TypeError: cannot use a string pattern on a bytes-like object

tests/test_match.py:41: TypeError
======================== 1 failed, 57 passed in 0.41s =========================
```

The str test right before it calls `match.filter(["x.py"], "*.py")` first. Why does the bytes call \
get a string pattern, and what is the minimal fix?"""

ASSISTANT_FIX = """\
The bytes pattern never reaches `re.compile` as bytes: `_compiled` decodes it, calls `translate`, \
and re-encodes the result - that part is right - but the test module imports `fnmatch.translate` \
from the stdlib in a fixture and monkeypatches `match.translate` with it, which returns `str` for \
the bytes branch because of the `os.fsdecode` round trip the fixture does first. The cache then \
holds a str regex under the bytes key.

Minimal fix: make the bytes branch independent of whatever `translate` is bound to at call time, \
and never cache across types:

```python
@functools.lru_cache(maxsize=32768, typed=True)
def _compiled(pat):
    if isinstance(pat, bytes):
        return re.compile(_translate_str(pat.decode("latin-1")).encode("latin-1"))
    return re.compile(_translate_str(pat))
```

with `_translate_str` the private implementation and `translate = _translate_str` as the public \
name. `typed=True` was already there; the monkeypatch was the real cause, so also drop that fixture."""

USER_COMPARE = """\
Fixed, all 58 pass. Now the comparison part: port `filecmp.cmp`, `cmpfiles` and `dircmp` into \
`fsutil/compare.py`. Replace `dircmp`'s lazy `__getattr__` phases with a frozen `DirComparison` \
dataclass computed eagerly by a `compare_dirs(a, b, ignore=None, hide=None, shallow=True)` function \
(recursive `subdirs` as a dict of DirComparison). Keep the module-level cache and its signature check. \
Then write pytest tests using `tmp_path`: identical trees, a file that differs only in content with \
the same size and mtime (shallow vs deep), a file on one side only, a broken symlink, and ignore/hide \
lists."""


def stdlib_sources(stdlib: Path | None = None, check: bool = True) -> dict[str, str]:
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    out: dict[str, str] = {}
    for name, digest in MODULES.items():
        data = (root / name).read_bytes()
        if check and hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"{root / name} differs from the CPython 3.11.7 source this request set pins "
                             f"(sha256 mismatch); run with Python 3.11.7 or pass --no-check to build a variant")
        out[name] = data.decode("utf-8")
    return out


def first_user_message(sources: dict[str, str]) -> str:
    parts = [INTRO]
    for name, text in sources.items():
        parts.append(f"### Lib/{name}\n\n```python\n{text.rstrip()}\n```\n\n")
    parts.append(OUTRO)
    return "".join(parts)


def build_requests(sources: dict[str, str]) -> list[dict[str, Any]]:
    messages: list[dict[str, str]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": first_user_message(sources)},
    ]
    turns = [(ASSISTANT_PLAN, USER_MATCH), (ASSISTANT_MATCH, USER_FAILURE), (ASSISTANT_FIX, USER_COMPARE)]
    bodies = [_body(messages)]
    for answer, follow_up in turns:
        messages = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}]
        bodies.append(_body(messages))
    return bodies


def _body(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": MODEL, "messages": list(messages), "max_tokens": 512, "temperature": 0,
            "reasoning_effort": "low", "stream": True}


def estimated_tokens(body: dict[str, Any]) -> int:
    return sum(len(m["content"]) for m in body["messages"]) // CHARS_PER_TOKEN


def write_jsonl(bodies: list[dict[str, Any]], out: Path) -> bytes:
    data = "".join(json.dumps(b, ensure_ascii=False, separators=(",", ":")) + "\n" for b in bodies).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.harness.make_requests", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=OUT_DEFAULT)
    p.add_argument("--stdlib", type=Path, default=None, help="folder of the Python stdlib sources")
    p.add_argument("--no-check", action="store_true", help="accept stdlib sources that differ from 3.11.7")
    args = p.parse_args(argv)
    bodies = build_requests(stdlib_sources(args.stdlib, check=not args.no_check))
    data = write_jsonl(bodies, args.out)
    for i, b in enumerate(bodies):
        chars = sum(len(m["content"]) for m in b["messages"])
        print(f"request {i}: {len(b['messages'])} messages, {chars} chars, ~{estimated_tokens(b)} tokens "
              f"(at {CHARS_PER_TOKEN} chars/token)")
    print(f"wrote {args.out} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
