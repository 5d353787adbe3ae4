#!/usr/bin/env python3
"""Index of the `Note [Title]` blocks in the source tree: docs/notes.md.

A Note is a comment block whose first line is exactly `// Note [Title]` (or `# Note [Title]`); code cites it by
title. This prints the index (title, file, the Note's first sentence), writes it (--write), or checks that
docs/notes.md is up to date (--check, the meson test `notes_index` in suite meta).

    tools/notes_index.py [--write | --check] [ROOT]
"""
import os
import re
import sys

SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".py", ".sh")
SKIP_DIRS = {".git", "docs", "subprojects", "__pycache__"}
TITLE = re.compile(r"^\s*(//|#)\s*Note \[([^\]]+)\]\s*$")
SUMMARY_CHARS = 150
HEADER = """# Notes

A *Note* is a comment block that explains a decision too long for a line comment. It starts with a line
`// Note [Title]` and is cited elsewhere by its title (`see Note [Title] in file.h`). This index lists every Note in
the tree with its first sentence. It is generated: after adding, renaming or rewording a Note, run
`tools/notes_index.py --write` (the test `notes_index`, suite `meta`, fails while this file is stale).

| Note | File | What it says |
|---|---|---|
"""


def is_build_dir(path):
    return os.path.exists(os.path.join(path, "meson-private")) or os.path.exists(os.path.join(path, "build.ninja"))


def first_sentence(lines):
    text = " ".join(lines).strip()
    m = re.search(r"(?<=\.)\s+(?=[A-Z(`])", text)
    if m:
        text = text[: m.start()]
    if len(text) > SUMMARY_CHARS:
        text = text[:SUMMARY_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return text.replace("|", "\\|")


def notes(root):
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not is_build_dir(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            if not name.endswith(SUFFIXES):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                m = TITLE.match(line)
                if not m:
                    continue
                marker, title = m.group(1), m.group(2)
                body = []
                for nxt in lines[i + 1:]:
                    s = nxt.strip()
                    if not s.startswith(marker) or TITLE.match(nxt):
                        break
                    s = s[len(marker):].strip()
                    if not s:
                        break
                    body.append(s)
                found.append((title, os.path.relpath(path, root), first_sentence(body)))
    return sorted(found, key=lambda n: (n[0].lower(), n[1]))


def render(root):
    rows = [f"| {title} | `{path}` | {summary} |" for title, path, summary in notes(root)]
    return HEADER + "\n".join(rows) + "\n"


def main(argv):
    mode = None
    args = []
    for a in argv:
        if a in ("--write", "--check"):
            mode = a
        else:
            args.append(a)
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    text = render(root)
    target = os.path.join(root, "docs", "notes.md")
    if mode == "--write":
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    elif mode == "--check":
        try:
            with open(target, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            print("docs/notes.md is stale: a Note was added, renamed, moved or reworded. "
                  "Run tools/notes_index.py --write and commit docs/notes.md.", file=sys.stderr)
            cur, new = set(current.splitlines()), set(text.splitlines())
            for line in sorted(new - cur):
                print(f"  missing: {line}", file=sys.stderr)
            for line in sorted(cur - new):
                print(f"  outdated: {line}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
