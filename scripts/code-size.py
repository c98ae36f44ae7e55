#!/usr/bin/env python3
"""The size limits of the library's sources: no file over 1,500 lines and
no function over 150.

Reads the C, CUDA and header files under ir/, passes/, runtime/, kernels/,
cli/ and python/ (generated files and tests are not the library's) and
prints every file and every function over its limit.  A function is a
top-level brace block whose opening brace follows a closing parenthesis
(a definition's parameter list, `__launch_bounds__(...)` included); its
length counts from the line of its name to its closing brace.  Comments,
strings and preprocessor lines are skipped while braces are matched.

Usage: scripts/code-size.py [--root DIR] [--file-limit N] [--function-limit N] [--list N] [--self-test]
  --list N     also print the N longest functions (for planning)
  --self-test  first check the measuring itself on made-up sources
Exit status: 0 when everything is within the limits, 1 otherwise.
"""
import argparse
import os
import re
import sys

FOLDERS = ("ir", "passes", "runtime", "kernels", "cli", "python")
SUFFIXES = (".c", ".h", ".cu", ".cuh", ".inc")


def strip_code(text):
    """The text with comments, string and character literals and
    preprocessor lines blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\($")


def functions(path):
    """(name, first line, last line) of each function defined in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = strip_code(f.read())
    result = []
    depth = 0
    start = None
    for pos, c in enumerate(code):
        if c == "{":
            if depth == 0:
                before = code[:pos].rstrip()
                if before.endswith(")") or before.endswith("const"):
                    # walk back over the balanced parameter list to the name
                    k = len(before) - 1
                    if before.endswith("const"):
                        k = len(before.rstrip()[:-5].rstrip()) - 1
                    level = 0
                    while k >= 0:
                        if before[k] == ")":
                            level += 1
                        elif before[k] == "(":
                            level -= 1
                            if level == 0:
                                break
                        k -= 1
                    m = NAME.search(before[: k + 1])
                    name = m.group(1) if m else "?"
                    if name in ("__launch_bounds__",) and m:
                        # the name stands before the launch bounds
                        m2 = NAME.search(before[: m.start()].rstrip() + "(")
                        name = m2.group(1) if m2 else name
                    first = before.count("\n", 0, m.start() if m else k) + 1
                    start = (name, first)
                else:
                    start = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start is not None:
                result.append((start[0], start[1], code.count("\n", 0, pos) + 1))
                start = None
    return result


def sources(root):
    for folder in FOLDERS:
        for dirpath, _dirs, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if name.endswith(SUFFIXES) and not name.endswith((".pb-c.c", ".pb-c.h")):
                    yield os.path.join(dirpath, name)


def self_test():
    """The measuring on made-up sources: a definition whose braces hide in
    comments, strings and a macro, a CUDA kernel with launch bounds, a
    struct initializer (not a function)."""
    body = "\n".join("\tx += %d; /* { */" % i for i in range(148))
    src = (
        "#define OPEN {\n"
        "static const int table[] = {1, 2};\n"
        "static int long_one(int x,\n\t\tint y)\n{\n" + body + "\n\treturn x;\n}\n"
        "__global__ void __launch_bounds__(256) kern(const char *s)\n{\n\tputs(\"}\");\n}\n"
        "int tail(void) { return '}'; }\n"
    )
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.cu")
        with open(path, "w") as f:
            f.write(src)
        got = {name: last - first + 1 for name, first, last in functions(path)}
    want = {"long_one": 153, "kern": 4, "tail": 1}
    if got != want:
        print(f"code-size: self-test: measured {got}, expected {want}", file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--file-limit", type=int, default=1500)
    ap.add_argument("--function-limit", type=int, default=150)
    ap.add_argument("--list", type=int, default=0)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test and self_test():
        return 1
    root = os.path.normpath(args.root)
    over = 0
    every = []
    for path in sources(root):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().count("\n")
        if lines > args.file_limit:
            print(f"{rel}: {lines} lines (the limit is {args.file_limit})")
            over += 1
        for name, first, last in functions(path):
            length = last - first + 1
            every.append((length, rel, first, name))
            if length > args.function_limit:
                print(f"{rel}:{first}: {name}: {length} lines (the limit is {args.function_limit})")
                over += 1
    if args.list:
        for length, rel, first, name in sorted(every, reverse=True)[: args.list]:
            print(f"  {length:5d} {rel}:{first} {name}")
    if over:
        print(f"code-size: {over} over the limits", file=sys.stderr)
        return 1
    print(f"code-size: every file within {args.file_limit} lines, every function within {args.function_limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
