#!/usr/bin/python3
"""Checks the manual: every link of README.md and docs/*.md resolves (files,
and anchors as GitHub makes them from headings), every function of the
install scripts and every zklock.* setting is in docs/reference.md, the
README's batch job is the one the regression tests run, and the README
stays short enough to read in one sitting (40 kB at most).

    python3 test/docs_check.py        (from anywhere; exits 1 on a problem)
"""

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent
README_MAX = 40 * 1024


def anchors(path):
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    seen = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith('```'):
            in_code = not in_code
        m = None if in_code else re.match(r'^#+ (.+)$', line)
        if not m:
            continue
        a = re.sub(r'[^\w\- ]', '', m.group(1).strip().lower()).replace(' ', '-')
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else '%s-%d' % (a, n))
    return out


def links(path):
    in_code = False
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith('```'):
            in_code = not in_code
        if in_code:
            continue
        for m in re.finditer(r'\[[^\]]+\]\(([^)\s]+)\)', line):
            yield no, m.group(1)


def main():
    problems = []
    docs = [SRC / 'README.md'] + sorted((SRC / 'docs').glob('*.md'))
    for doc in docs:
        for no, target in links(doc):
            if re.match(r'^[a-z]+:', target):
                continue
            file_part, _, anchor = target.partition('#')
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = '%s:%d: %s' % (doc.relative_to(SRC), no, target)
            if not dest.exists():
                problems.append('%s: no such file' % where)
            elif anchor and dest.suffix == '.md' and anchor not in anchors(dest):
                problems.append('%s: no such heading' % where)

    reference = (SRC / 'docs' / 'reference.md').read_text()
    functions = set()
    for script in (SRC / 'sql').glob('zklock--*.sql'):
        functions |= set(re.findall(r'CREATE FUNCTION (\w+)\(', script.read_text()))
    for f in sorted(functions):
        if '`%s(' % f not in reference:
            problems.append('docs/reference.md: function %s is not described' % f)
    settings = re.findall(r'DefineCustom\w+Variable\("(zklock\.\w+)"',
                          (SRC / 'src' / 'guc.c').read_text())
    for s in settings:
        if '`%s`' % s not in reference:
            problems.append('docs/reference.md: setting %s is not described' % s)

    # The README's batch job is the one sql/batch_job.sql runs.
    m = re.search(r'```sql\n(CREATE PROCEDURE nightly_billing\(\).*?END \$\$;)\n',
                  (SRC / 'README.md').read_text(), re.S)
    if m is None or m.group(1) not in (SRC / 'sql' / 'batch_job.sql').read_text():
        problems.append('README.md: the batch job is not the one sql/batch_job.sql tests')

    size = (SRC / 'README.md').stat().st_size
    if size > README_MAX:
        problems.append('README.md: %d bytes, more than %d' % (size, README_MAX))

    for p in problems:
        print(p)
    print('docs: %d links checked in %d files, %d functions, %d settings; %s'
          % (sum(1 for d in docs for _ in links(d)), len(docs), len(functions),
             len(settings), 'ok' if not problems else '%d problems' % len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
