# SPDX-License-Identifier: Apache-2.0
"""Source checks for the CUDA kernels that need no GPU.

nvcc 13.0 (V13.0.88) drops the statement after an unbraced `if constexpr (false) for (...) { ... }` inside
a lambda of a template: the GDN register-state pass lost its cp.async commit that way on every two-stage
instantiation without v3 (wrong backward gradients on the H200, session 11). Every `if constexpr` whose
statement is a loop must therefore brace it."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
IF_CONSTEXPR = re.compile(r"\bif constexpr\s*\(")


def condition_end(text, start):
    """Index just past the `)` closing the condition whose `(` is at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return len(text)


def without_comments(text):
    """text with // and /* */ comments blanked (line numbers kept)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def unbraced_loops(text):
    """Line numbers of the `if constexpr (...)` statements whose statement is an unbraced loop."""
    text = without_comments(text)
    lines = []
    for m in IF_CONSTEXPR.finditer(text):
        end = condition_end(text, m.end() - 1)
        if re.match(r"\s*(for|while|do)\b", text[end:]):
            lines.append(text.count("\n", 0, m.start()) + 1)
    return lines


def test_detector_finds_the_pattern():
    bad = "auto f = [&] {\n  if constexpr (V3)\n    for (int i = 0; i < n; ++i) {\n      x[i] = 0;\n    }\n  commit();\n};\n"
    good = bad.replace("if constexpr (V3)\n", "if constexpr (V3) {\n").replace("    }\n  commit", "    }\n  }\n  commit")
    assert unbraced_loops(bad) == [2]
    assert unbraced_loops(good) == []
    assert unbraced_loops("if constexpr (sizeof(T) == (2)) while (x) y();") == [1]
    assert unbraced_loops("// if constexpr (V3) for (;;) {}\nx();") == []


def test_no_unbraced_loop_under_if_constexpr():
    found = []
    for path in sorted((ROOT / "src").rglob("*")):
        if path.suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp"):
            found += [f"{path.relative_to(ROOT)}:{n}" for n in unbraced_loops(path.read_text())]
    assert not found, "brace the loop under these `if constexpr` (nvcc 13.0 drops what follows): " + ", ".join(found)
