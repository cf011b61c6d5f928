#!/usr/bin/env python3
"""Source sizes against the house limits: files over ~800 lines, functions over ~150 lines.

Reads the tracked files of the working tree, or of one or more git revisions (--ref), without checking
anything out. C++/CUDA functions are found by a brace-matching scan that skips comments, string and
character literals (raw strings included) and preprocessor lines; Python functions by the ast module.

  scripts/code_sizes.py                       # the working tree: summary and the over-limit lists
  scripts/code_sizes.py --ref main --ref HEAD # a before/after summary table, then the lists of the last ref
  scripts/code_sizes.py --check               # exit 1 when anything not exempt is over a limit

A function's length runs from the first line of its signature to its closing brace. A class's members are
its non-static data member declarations (one per declaration statement). A file is a data table when most
of its lines sit inside brace initializers at namespace scope; EXEMPT names the functions the limits allow
(the flag table, the pickle opcode interpreter).
"""

import argparse
import ast
import re
import subprocess
import sys
from dataclasses import dataclass, field

FILE_LIMIT = 800
FUNCTION_LIMIT = 150

CPP_EXTENSIONS = (".cpp", ".cc", ".cxx", ".cu", ".h", ".hpp", ".cuh")
PY_EXTENSIONS = (".py",)
OTHER_SOURCE_EXTENSIONS = (".sh", ".cmake")
OTHER_SOURCE_NAMES = ("CMakeLists.txt",)

# (path suffix, function name) -> why the function limit does not apply.
EXEMPT = {
    ("hf_pickle.cpp", "PickleMachine::run"): "pickle opcode interpreter",
    ("train_config_flags.cpp", "flag_table"): "the flag table",
    ("flash_disentangled_attention.cu", "flash_attention_forward_kernel"):
        "a fused kernel's tile loop (its steps are device functions; what stays shares registers across it)",
    ("flash_disentangled_attention_backward.cu", "flash_attention_backward_kernel"):
        "a fused kernel's tile loop (its steps are device functions; what stays shares registers across it)",
    ("short_disentangled_attention.cu", "short_attention_forward_kernel"):
        "a fused kernel's tile loop (its steps are device functions; what stays shares registers across it)",
}

QUALIFIER_WORDS = {"const", "override", "final", "noexcept", "mutable", "volatile", "try"}
CONTROL_WORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof"}
# names followed by "(" in a signature that are not the function's name
SIGNATURE_ATTRIBUTES = {"__launch_bounds__", "alignas", "__attribute__", "__declspec", "decltype", "__align__"}


def is_source(path):
    name = path.rsplit("/", 1)[-1]
    return (path.endswith(CPP_EXTENSIONS) or path.endswith(PY_EXTENSIONS) or path.endswith(OTHER_SOURCE_EXTENSIONS)
            or name in OTHER_SOURCE_NAMES)


# ----------------------------------------------------------------------------------------------------------
# C++ / CUDA scan


def strip_cpp(text):
    """Blank out comments, literals and preprocessor lines; keep newlines so line numbers hold."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # preprocessor line, with continuations
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
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
                                                               or text[i - 1] in "uU8L"):
            m = re.match(r'R"([^()\\ \n]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            closing = ")" + m.group(1) + '"'
            end = text.find(closing, i + m.end())
            end = n if end < 0 else end + len(closing)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum() and _in_number(text, i))):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out.append(c + " " * (end - i - 2) + c if end - i >= 2 else c)
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _in_number(text, i):
    """True when the quote at i is a digit separator (1'000'000, 0xFF'FF)."""
    j = i - 1
    while j >= 0 and (text[j].isalnum() or text[j] in "'."):
        j -= 1
    return text[j + 1].isdigit()


@dataclass
class Function:
    path: str
    name: str
    start: int
    end: int

    @property
    def lines(self):
        return self.end - self.start + 1


@dataclass
class ClassInfo:
    path: str
    name: str
    line: int
    members: int = 0


@dataclass
class FileInfo:
    path: str
    lines: int
    functions: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    data_lines: int = 0
    warning: str = ""

    @property
    def is_data_table(self):
        return self.lines > 0 and self.data_lines * 2 > self.lines


def _depth0(header, opening, closing):
    """Yield (index, char) of header's characters outside all bracket pairs in opening/closing."""
    depth = 0
    for i, ch in enumerate(header):
        if ch in opening:
            depth += 1
        elif ch in closing:
            depth = max(0, depth - 1)
        elif depth == 0:
            yield i, ch


def _strip_template_prefix(header):
    header = header.strip()
    while header.startswith("template"):
        k = header.find("<")
        if k < 0:
            return header
        depth = 0
        for j in range(k, len(header)):
            if header[j] == "<":
                depth += 1
            elif header[j] == ">":
                depth -= 1
                if depth == 0:
                    header = header[j + 1:].strip()
                    break
        else:
            return header
    return header


ACCESS_RE = re.compile(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+")


def _classify(header):
    """Return ('namespace'|'class'|'enum'|'function'|'init', name) for the brace that ends header."""
    h = ACCESS_RE.sub("", header)
    h = _strip_template_prefix(h)
    h = re.sub(r"\[\[.*?\]\]", " ", h).strip()
    if re.match(r"^(inline\s+)?namespace\b", h) or re.match(r'^extern\s*""\s*$', h) or h == "":
        return "namespace" if h else "init", ""
    if re.match(r"^enum\b", h):
        return "enum", ""
    m = re.match(r"^(?:typedef\s+)?(class|struct|union)\b(.*)$", h, re.S)
    if m and "(" not in m.group(2).split(":")[0].replace("alignas", ""):
        rest = re.sub(r"\balignas\s*\([^)]*\)", " ", m.group(2))
        rest = re.split(r"(?<!:):(?!:)", rest)[0]
        words = rest.replace("final", " ").split()
        return "class", (words[-1] if words else "<anonymous>")
    # A function: a depth-0 "(" preceded by a name, no "=" before it (else an initializer or a lambda).
    for i, ch in _depth0(h, "([{", ")]}"):
        if ch == "=" and not re.search(r"operator\s*\S*$", h[:i]):
            return "init", ""
    m = None
    template_args = r"(?:\s*<[^<>;{}]*(?:<[^<>;{}]*>[^<>;{}]*)*>)?"  # f<float>( : a specialization
    for m_ in re.finditer(r"(~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*" + template_args +
                          r"|operator\s*(?:\(\)|[^\s(]+))\s*\(", h):
        word = m_.group(1).split("::")[-1].strip()
        if word in SIGNATURE_ATTRIBUTES:
            continue
        if word in CONTROL_WORDS:
            return "init", ""
        m = m_
        break
    if m is None:
        return "init", ""
    name = re.sub(r"\s+", "", m.group(1))
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", name):  # a macro-defined function such as TEST(Suite, Name)
        k = m.end()
        depth, j = 1, k
        while j < len(h) and depth:
            depth += {"(": 1, ")": -1}.get(h[j], 0)
            j += 1
        name = name + "(" + re.sub(r"\s+", " ", h[k:j - 1]).strip() + ")"
    return "function", name


def _open_brackets(header):
    """True inside an unclosed "(" or "[": a brace there is an argument ("T x = {}" as a default)."""
    depth = 0
    for ch in header:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
    return depth > 0


def _is_member_init_brace(header):
    """A "{" inside a constructor's initializer list (a_{x}) rather than the body."""
    h = header.rstrip()
    if not h or not (h[-1].isalnum() or h[-1] in "_>"):
        return False
    word = re.search(r"(\w+)\s*$", h)
    if word and word.group(1) in QUALIFIER_WORDS:
        return False
    # the parameter list's ")" then a single ":" at depth 0
    seen_paren = False
    depth = 0
    for i, ch in enumerate(h):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == ")":
                seen_paren = True
        elif depth == 0 and seen_paren and ch == ":" and h[i - 1:i] != ":" and h[i + 1:i + 2] != ":":
            return True
    return False


def _data_member_count(statement):
    s = ACCESS_RE.sub("", statement).strip()
    s = re.sub(r"\[\[.*?\]\]", " ", s).strip()
    if not s:
        return 0
    first = s.split()[0]
    if first in ("using", "typedef", "friend", "static", "template", "enum", "static_assert", "class", "struct",
                 "union", "namespace", "constexpr", "inline") or first.startswith("static_assert"):
        return 0
    if re.match(r"^(static|constexpr)\b", s) or " static " in f" {s} ".replace("\n", " ")[:40]:
        return 0
    # cut a default member initializer "= ..." at depth 0
    for i, ch in _depth0(s, "([{", ")]}"):
        if ch == "=" and not re.search(r"operator\s*\S*$", s[:i]):
            s = s[:i].rstrip()
            break
    # a member function declaration ends with its parameter list and qualifiers
    tail = re.sub(r"\b(const|override|final|noexcept|volatile)\b|&&?|\s", "", s)
    if tail.endswith(")"):
        return 0
    if re.search(r"->\s*[\w:<>,\s*&]+$", s):  # trailing return type
        return 0
    return 1 + sum(1 for _, ch in _depth0(s, "([{<", ")]}>") if ch == ",")  # "cudaEvent_t a, b;" is two


def scan_cpp(path, text):
    info = FileInfo(path, text.count("\n") + (0 if text.endswith("\n") or not text else 1))
    code = strip_cpp(text)
    # scope stack entries: (kind, name, start_line, header_start_line, ClassInfo or None)
    stack = [("namespace", "", 1, 1, None)]
    header = []
    header_line = None
    line = 1
    init_depth = 0  # braces inside a function body or an initializer: only counted
    init_start = None
    body_stack = []  # (kind, name, header_line, class_info) for the scope each pending brace closes

    def flush_statement():
        nonlocal header, header_line
        text_ = "".join(header)
        top = stack[-1]
        if top[0] == "class" and top[4] is not None:
            top[4].members += _data_member_count(text_)
        header, header_line = [], None

    for ch in code:
        if ch == "\n":
            line += 1
        if init_depth:
            if ch == "{":
                init_depth += 1
            elif ch == "}":
                init_depth -= 1
                if init_depth == 0:
                    kind, name, start, cls = body_stack.pop()
                    if kind == "function":
                        info.functions.append(Function(path, name, start, line))
                    elif kind == "init":
                        if stack[-1][0] == "namespace":
                            info.data_lines += line - init_start
                        header.append("{}")
            continue
        if ch == "{":
            h = "".join(header)
            top_kind = stack[-1][0]
            if top_kind in ("namespace", "class"):
                if _is_member_init_brace(h) or _open_brackets(h):
                    init_depth = 1
                    body_stack.append(("member-init", "", None, None))
                    header.append("{")
                    continue
                kind, name = _classify(h)
            else:
                kind, name = "init", ""
            start = header_line if header_line is not None else line
            if kind in ("namespace", "class", "enum"):
                cls = None
                if kind == "class":
                    cls = ClassInfo(path, name, start)
                    info.classes.append(cls)
                stack.append((kind, name, line, start, cls))
                header, header_line = [], None
            elif kind == "function":
                init_depth = 1
                body_stack.append(("function", name, start, None))
                header, header_line = [], None
            else:
                init_depth = 1
                init_start = line
                body_stack.append(("init", "", start, None))
                if header_line is None:
                    header_line = line
            continue
        if ch == "}":
            if len(stack) > 1:
                kind = stack.pop()[0]
                if kind in ("class", "enum"):
                    header, header_line = ["}"], line  # "} name;" may follow
                    continue
            else:
                info.warning = f"unbalanced '}}' at line {line}"
            header, header_line = [], None
            continue
        if ch == ";":
            if stack[-1][0] == "enum":
                continue
            if header and "".join(header).lstrip().startswith("}"):
                header, header_line = [], None
                continue
            flush_statement()
            continue
        if ch == ":" and stack[-1][0] == "class":
            h = "".join(header).strip()
            if h in ("public", "private", "protected"):
                header, header_line = [], None
                continue
        if header_line is None and not ch.isspace():
            header_line = line
        header.append(ch)
    if len(stack) > 1 or init_depth:
        info.warning = info.warning or "unbalanced braces at end of file (preprocessor branches?)"
    return info


# ----------------------------------------------------------------------------------------------------------
# Python scan


def scan_python(path, text):
    info = FileInfo(path, text.count("\n") + (0 if text.endswith("\n") or not text else 1))
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        info.warning = f"syntax error: {e}"
        return info

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                info.functions.append(Function(path, prefix + child.name, start, child.end_lineno))
            elif isinstance(child, ast.ClassDef):
                cls = ClassInfo(path, prefix + child.name, child.lineno)
                attrs = set()
                for sub in ast.walk(child):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self"
                            and isinstance(sub.ctx, ast.Store)):
                        attrs.add(sub.attr)
                    elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                        attrs.add(sub.target.id)
                cls.members = len(attrs)
                info.classes.append(cls)
                visit(child, prefix + child.name + ".")

    visit(tree, "")
    return info


# ----------------------------------------------------------------------------------------------------------
# Reading a tree


def git(args, cwd, input_=None):
    return subprocess.run(["git"] + args, cwd=cwd, input=input_, capture_output=True, check=True).stdout


def read_tree(repo, ref):
    """{path: text} for the tracked source files of ref (None: the working tree)."""
    files = {}
    if ref is None:
        paths = git(["ls-files", "-z"], repo).decode().split("\0")
        for p in filter(is_source, filter(None, paths)):
            try:
                with open(f"{repo}/{p}", "rb") as f:
                    files[p] = f.read().decode("utf-8", "replace")
            except (FileNotFoundError, IsADirectoryError):
                pass  # deleted in the working tree but not yet from the index
        return files
    paths = git(["ls-tree", "-r", "-z", "--name-only", ref], repo).decode().split("\0")
    paths = [p for p in paths if p and is_source(p)]
    blob = git(["cat-file", "--batch"], repo, "".join(f"{ref}:{p}\n" for p in paths).encode())
    pos = 0
    for p in paths:
        nl = blob.index(b"\n", pos)
        head = blob[pos:nl].split()
        if len(head) < 3 or head[1] != b"blob":
            pos = nl + 1
            continue
        size = int(head[2])
        files[p] = blob[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        pos = nl + 1 + size + 1
    return files


def scan_tree(files):
    infos = []
    for path, text in sorted(files.items()):
        if path.endswith(CPP_EXTENSIONS):
            infos.append(scan_cpp(path, text))
        elif path.endswith(PY_EXTENSIONS):
            infos.append(scan_python(path, text))
        else:
            infos.append(FileInfo(path, text.count("\n")))
    return infos


def exemption(fn):
    for (suffix, name), why in EXEMPT.items():
        if fn.path.endswith(suffix) and fn.name == name:
            return why
    return ""


@dataclass
class Summary:
    files: int
    lines: int
    files_over: list
    functions_over: list
    largest_file: FileInfo
    largest_function: Function
    largest_class: ClassInfo
    data_tables: list
    warnings: list


def summarize(infos):
    functions = [f for i in infos for f in i.functions]
    classes = [c for i in infos for c in i.classes]
    return Summary(
        files=len(infos),
        lines=sum(i.lines for i in infos),
        files_over=sorted((i for i in infos if i.lines > FILE_LIMIT), key=lambda i: -i.lines),
        functions_over=sorted((f for f in functions if f.lines > FUNCTION_LIMIT), key=lambda f: -f.lines),
        largest_file=max(infos, key=lambda i: i.lines),
        largest_function=max(functions, key=lambda f: f.lines),
        largest_class=max(classes, key=lambda c: c.members),
        data_tables=[i.path for i in infos if i.is_data_table],
        warnings=[f"{i.path}: {i.warning}" for i in infos if i.warning],
    )


def print_table(labels, summaries):
    rows = [
        ("source files", lambda s: str(s.files)),
        ("lines", lambda s: str(s.lines)),
        (f"files over {FILE_LIMIT} lines", lambda s: str(len([i for i in s.files_over if not i.is_data_table]))),
        (f"functions over {FUNCTION_LIMIT} lines",
         lambda s: str(len([f for f in s.functions_over if not exemption(f)]))),
        ("largest file", lambda s: f"{s.largest_file.path} ({s.largest_file.lines})"),
        ("largest function",
         lambda s: f"{s.largest_function.name} ({s.largest_function.path}, {s.largest_function.lines})"),
        ("largest class (data members)",
         lambda s: f"{s.largest_class.name} ({s.largest_class.path}, {s.largest_class.members})"),
    ]
    cells = [[label] + [get(s) for s in summaries] for label, get in rows]
    header = [""] + labels
    widths = [max(len(r[k]) for r in cells + [header]) for k in range(len(header))]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    print(fmt.format(*header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print(fmt.format(*r))


def print_lists(label, s, top_classes):
    print(f"\n{label}: files over {FILE_LIMIT} lines")
    for i in s.files_over:
        note = "  (data table)" if i.is_data_table else ""
        print(f"  {i.lines:6d}  {i.path}{note}")
    print(f"\n{label}: functions over {FUNCTION_LIMIT} lines")
    for f in s.functions_over:
        why = exemption(f)
        note = f"  (exempt: {why})" if why else ""
        print(f"  {f.lines:6d}  {f.path}:{f.start}  {f.name}{note}")
    if top_classes:
        print(f"\n{label}: classes with the most data members")
        for c in top_classes:
            print(f"  {c.members:6d}  {c.path}:{c.line}  {c.name}")
    for w in s.warnings:
        print(f"warning: {w}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", action="append", default=[],
                    help="a git revision to measure (repeat for a before/after table); default: the working tree")
    ap.add_argument("--repo", default=".", help="the repository (default: the current directory)")
    ap.add_argument("--classes", type=int, default=5, help="how many of the largest classes to list")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a file or function not exempt is over its limit")
    args = ap.parse_args()
    try:
        repo = git(["rev-parse", "--show-toplevel"], args.repo).decode().strip()
        for ref in args.ref:
            git(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], repo)
    except subprocess.CalledProcessError as e:
        sys.exit(f"code_sizes.py: {' '.join(e.cmd[1:])} failed: {e.stderr.decode().strip() or 'not a revision'}")
    refs = args.ref or [None]
    labels, summaries, class_lists = [], [], []
    for ref in refs:
        infos = scan_tree(read_tree(repo, ref))
        if not infos:
            sys.exit(f"no source files in {ref or 'the working tree'}")
        labels.append(ref or "working tree")
        summaries.append(summarize(infos))
        class_lists.append(sorted((c for i in infos for c in i.classes), key=lambda c: -c.members)[:args.classes])
    print_table(labels, summaries)
    print_lists(labels[-1], summaries[-1], class_lists[-1])
    if args.check:
        s = summaries[-1]
        over = [i for i in s.files_over if not i.is_data_table] + [f for f in s.functions_over if not exemption(f)]
        sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
