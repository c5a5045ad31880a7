#!/usr/bin/env python3
"""The files of src/ depend on each other one way only (issue 30).

A file depends on another when it calls a function, or uses a global, that
only the other defines; sharing a header alone is no dependency.  Prints the
graph's size and exits 1, naming a circle and what makes it, if there is
one.  Reads the sources as text (comments and strings left out), so it
needs no build.
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')


def code_of(path):
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)


def definitions(code):
    """Names a file defines for others: functions and globals not static."""
    names = set()
    lines = code.split('\n')
    for i, line in enumerate(lines):
        # A function: its name at the start of a line, its type above.
        m = re.match(r'([A-Za-z_]\w*)\(', line)
        if m and i > 0:
            ret = lines[i - 1].rstrip()
            if (re.match(r'[A-Za-z_]', ret) and not re.match(r'(static|extern|typedef)\b', ret)
                    and not ret.endswith((';', '}', ')', ','))):
                names.add(m.group(1))
        # A global: a declaration at the start of a line, maybe initialised.
        m = re.match(r'(?!static\b|extern\b|typedef\b|PG_)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)'
                     r'\s*(\[[^\]]*\])?\s*(;|=)', line)
        if m and '(' not in line.split('=')[0]:
            names.add(m.group(1))
    return names


def main():
    files = sorted(f for f in os.listdir(SRC) if f.endswith('.c'))
    code = {f: code_of(os.path.join(SRC, f)) for f in files}
    owner = {}
    for f in files:
        for name in definitions(code[f]):
            owner[name] = f
    deps = {f: {} for f in files}
    for f in files:
        for name in set(re.findall(r'\b[A-Za-z_]\w*\b', code[f])):
            g = owner.get(name)
            if g is not None and g != f:
                deps[f].setdefault(g, []).append(name)

    # A circle: a path back to where it began (depth-first, colours).
    colour = {f: 0 for f in files}
    stack = []

    def visit(f):
        colour[f] = 1
        stack.append(f)
        for g in sorted(deps[f]):
            if colour[g] == 1:
                return stack[stack.index(g):] + [g]
            if colour[g] == 0:
                found = visit(g)
                if found:
                    return found
        stack.pop()
        colour[f] = 2
        return None

    for f in files:
        if colour[f] == 0:
            circle = visit(f)
            if circle:
                print('src: a circle: ' + ' -> '.join(circle))
                for a, b in zip(circle, circle[1:]):
                    print('  %s uses %s of %s' % (a, ', '.join(sorted(deps[a][b])), b))
                return 1
    edges = sum(len(d) for d in deps.values())
    print('src: %d files, %d dependencies, no circle' % (len(files), edges))
    return 0


if __name__ == '__main__':
    sys.exit(main())
