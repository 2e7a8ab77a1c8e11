#!/usr/bin/env python3
"""Keeps the code-size rule true: no function over 80 lines and no file over
600 lines among the git-tracked .cc/.h/.cu/.cuh files.

    check-code-size.py [--root DIR] [--allowlist FILE] [--max-function N]
                       [--max-file N]

A function is a brace body whose opening is a function signature (a
parameter list's closing parenthesis, then qualifiers, a trailing return
type or a constructor's initializer list) or a TEST*-style macro; its
length runs from the signature's first line (after any template<...>
introducer) to the closing brace. Class,
struct and namespace bodies are searched for functions; brace-initialised
data (tables, enum bodies, arguments in parentheses) is not a function.
Comments, string and character literals and preprocessor lines are blanked
before the scan. Lambdas count towards the function that holds them.

The allow-list names the offenders that are known and not yet split, one a
line: `path:Function` for a function (as this script prints it) and a bare
`path` for a file; `#` starts a comment. Prints each offender not on the
list and exits 1 when there is one; allow-list entries that are no longer
offenders are only reported, so that whoever splits them can drop them.
Needs only Python's standard library.
"""

import argparse
import os
import re
import subprocess
import sys

EXTENSIONS = (".cc", ".h", ".cu", ".cuh")

# Keywords whose braces open a scope that may hold functions.
SCOPE_KEYWORDS = ("namespace", "class", "struct", "union", "extern")
# GoogleTest's test-defining macros, named Suite.Name in reports.
TEST_MACROS = ("TEST", "TEST_F", "TEST_P", "TYPED_TEST", "TYPED_TEST_P")

_QUALIFIERS = (r"(?:\s*(?:const|volatile|mutable|override|final|constexpr|"
               r"noexcept(?:\s*\([^()]*\))?|&&|&|try))*")
# What may follow a parameter list before a function body.
_AFTER_PARAMETERS = re.compile(
    _QUALIFIERS + r"\s*(?:->\s*[^;{}]*|(?<!:):(?!:).*[)}]|requires\b.*)?\s*$",
    re.S)
_ACCESS = re.compile(r"^\s*(?:(?:public|protected|private)\s*:(?!:)\s*)+")
_NAME = re.compile(r"((?:[\w~]+(?:<[^<>()]*>)?::)*"
                   r"(?:operator\s*\(\)|operator\s*[^\s\w(]+|[\w~]+))\s*$")


def blank(text):
    """Returns text with comments, literals and preprocessor lines turned into
    spaces, newlines kept, so that offsets and line numbers stay the same."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def wipe(begin, end):
        for k in range(begin, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            end = i
            while end < n and not (text[end] == "\n" and text[end - 1] != "\\"):
                end += 1
            wipe(i, end)
            i = end
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            wipe(i, end)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            wipe(i, end)
            i = end
        elif c == "R" and text.startswith('"', i + 1) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delimiter = text[i + 2:open_paren]
            end = text.find(")" + delimiter + '"', open_paren)
            end = n if end < 0 else end + len(delimiter) + 2
            wipe(i + 2, end - 1)
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            end = i + 1
            while end < n and text[end] != c and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            wipe(i + 1, min(end, n))
            i = end + 1
        else:
            i += 1
    return "".join(out)


def collapse_braces(head):
    """Returns head with each brace-initialiser folded into {}."""
    previous = None
    while previous != head:
        previous = head
        head = re.sub(r"\{[^{}]*\}", "{}", head)
    return head


def parameter_list_end(head):
    """Returns the offset of the opening parenthesis of head's parameter list
    when head reads as a function signature, else -1."""
    depth, opening = 0, -1
    for k, c in enumerate(head):
        if c == "(":
            if depth == 0:
                opening = k
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0 and _AFTER_PARAMETERS.match(head, k + 1):
                return opening
    return -1


def function_name(head, opening):
    """Returns the name of the function whose parameter list opens at
    head[opening]: Suite.Name for the TEST macros."""
    match = _NAME.search(head[:opening])
    name = match.group(1) if match else "<anonymous>"
    if name in TEST_MACROS:
        close = head.find(")", opening)
        arguments = [a.strip() for a in head[opening + 1:close].split(",")]
        return ".".join(arguments)
    return re.sub(r"\s+", "", name)


def skip_template(head):
    """Returns head without a leading template<...> introducer."""
    match = re.match(r"\s*template\s*<", head)
    if not match:
        return head
    depth, k = 1, match.end()
    while k < len(head) and depth:
        depth += {"<": 1, ">": -1}.get(head[k], 0)
        k += 1
    return skip_template(head[k:])


def matching_brace(text, opening):
    depth = 0
    for k in range(opening, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def functions(text):
    """Yields (name, first line, last line) of each function in the blanked
    text."""
    line_of = [0] * (len(text) + 1)
    line = 1
    for k, c in enumerate(text):
        line_of[k] = line
        if c == "\n":
            line += 1
    line_of[len(text)] = line

    head_start, parens, i = 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "(":
            parens += 1
        elif c == ")":
            parens -= 1
        elif c == ";" and parens == 0:
            head_start = i + 1
        elif c == "}":
            head_start = i + 1  # the end of a scope
        elif c == "{":
            raw_head = text[head_start:i]
            access = _ACCESS.match(raw_head)
            if access:
                head_start += access.end()
                raw_head = raw_head[access.end():]
            head = collapse_braces(raw_head)
            keyword = re.match(r"\s*(\w+)", skip_template(head))
            if parens > 0:
                i = matching_brace(text, i)  # an argument, not a body
            elif keyword and keyword.group(1) in SCOPE_KEYWORDS:
                head_start = i + 1  # search the scope's body too
            elif keyword and keyword.group(1) == "enum":
                i = matching_brace(text, i)
            elif parameter_list_end(head) >= 0:
                end = matching_brace(text, i)
                signature = skip_template(raw_head).lstrip()
                first = head_start + len(raw_head) - len(signature)
                yield (function_name(head, parameter_list_end(head)),
                       line_of[first], line_of[end])
                head_start, i = end + 1, end
            else:
                i = matching_brace(text, i)  # data: stays in the head
        i += 1


def tracked_sources(root):
    """Returns the sources git tracks under root; outside a git checkout (an
    unpacked release), those of the tree less hidden folders and build
    trees."""
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z"],
                                check=True, capture_output=True,
                                text=True).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        listed = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [
                d for d in subfolders if not d.startswith(".") and
                not os.path.exists(os.path.join(folder, d, "CMakeCache.txt"))
            ]
            listed += [os.path.relpath(os.path.join(folder, f), root)
                       for f in files]
    return sorted(p for p in listed if p.endswith(EXTENSIONS))


def read_allowlist(path):
    allowed = set()
    if not path:
        return allowed
    with open(path, encoding="utf-8") as f:
        for line in f:
            entry = line.split("#", 1)[0].strip()
            if entry:
                allowed.add(entry)
    return allowed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(here))
    parser.add_argument("--allowlist", default="")
    parser.add_argument("--max-function", type=int, default=80)
    parser.add_argument("--max-file", type=int, default=600)
    args = parser.parse_args()

    allowed = read_allowlist(args.allowlist)
    offenders, seen = [], set()
    for path in tracked_sources(args.root):
        full = os.path.join(args.root, path)
        if not os.path.exists(full):
            continue  # deleted in the work tree, not yet in the index
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines > args.max_file:
            seen.add(path)
            if path not in allowed:
                offenders.append(f"{path}: file of {lines} lines "
                                 f"(limit {args.max_file})")
        for name, first, last in functions(blank(text)):
            length = last - first + 1
            if length <= args.max_function:
                continue
            entry = f"{path}:{name}"
            seen.add(entry)
            if entry not in allowed:
                offenders.append(f"{path}:{first}: {name} has {length} lines "
                                 f"(limit {args.max_function})")

    for entry in sorted(allowed - seen):
        print(f"note: {entry} is within the limits now; drop it from "
              f"{args.allowlist}", file=sys.stderr)
    for offender in offenders:
        print(offender)
    if offenders:
        print(f"{len(offenders)} over the code-size limits", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
