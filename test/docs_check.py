#!/usr/bin/python3
"""Checks the manual: every link of README.md and docs/*.md resolves (files,
and anchors as GitHub makes them from headings), every function of the
install scripts and every zklock.* setting is in docs/reference.md, with
who may set it as src/guc.c says, every SQLSTATE the manual names is one
that zklock or PostgreSQL raises for it, the README's error table has the
reference's SQLSTATEs, the README's CI table says what test/run-all.sh runs,
the README's batch job is the one the regression tests run, its install line
installs a server, and the README stays short enough to read in one sitting
(40 kB at most).

    python3 test/docs_check.py        (from anywhere; exits 1 on a problem)
"""

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent
README_MAX = 40 * 1024

# How docs/reference.md's settings table says who may set a setting of
# each GUC context.
CONTEXTS = {
    'PGC_SIGHUP': 'configuration (reload)',
    'PGC_SUSET': 'superuser',
    'PGC_USERSET': 'anyone',
    'PGC_POSTMASTER': 'postmaster',
}

# SQLSTATEs the manual may name that PostgreSQL raises, not zklock's code:
# a SET of a PGC_SIGHUP setting, a cancel or statement_timeout and
# lock_timeout during a wait (zklock's waits take interrupts), a shared
# memory allocation beyond its limit, a COMMIT inside a block with an
# exception handler.
POSTGRES_RAISES = {'55P02', '57014', '55P03', '53200', '2D000'}


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


def table_rows(text, first_cell):
    """The cells of each Markdown table row whose first cell matches."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.startswith('|') and re.fullmatch(first_cell, cells[0]):
            yield cells


def check_settings(reference):
    """Who may set each setting, as the reference's table and its 55P02 row
    say, against each setting's context in src/guc.c."""
    problems = []
    guc = (SRC / 'src' / 'guc.c').read_text()
    contexts = dict(re.findall(r'DefineCustom\w+Variable\("(zklock\.\w+)",.*?(PGC_\w+)',
                               guc, re.S))
    said = {cells[0].strip('`'): cells[2]
            for cells in table_rows(reference, r'`zklock\.\w+`')}
    for name, context in sorted(contexts.items()):
        if said.get(name) != CONTEXTS[context]:
            problems.append('docs/reference.md: %s is set by "%s", src/guc.c says %s ("%s")'
                            % (name, said.get(name), context, CONTEXTS[context]))
    sighup = {n for n, c in contexts.items() if c == 'PGC_SIGHUP'}
    for cells in table_rows(reference, r'`55P02`.*'):
        named = set(re.findall(r'`(zklock\.\w+)`', cells[1]))
        if named != sighup:
            problems.append('docs/reference.md: the 55P02 row names %s; the settings '
                            'a session cannot SET are %s'
                            % (', '.join(sorted(named)), ', '.join(sorted(sighup))))
    return problems


def raised_sqlstates():
    """The SQLSTATEs zklock's C code raises."""
    errcodes = Path('/usr/include/postgresql/15/server/utils/errcodes.h').read_text()
    code_of = {name: ''.join(chars.split("','")).strip("'")
               for name, chars in re.findall(r'#define (ERRCODE_\w+) MAKE_SQLSTATE\(([^)]*)\)',
                                             errcodes)}
    raised = set()
    for f in (SRC / 'src').glob('*.[ch]'):
        text = f.read_text()
        raised |= {code_of[n] for n in re.findall(r'\b(ERRCODE_\w+)', text) if n in code_of}
        raised |= {''.join(chars.split("','")).strip("'")
                   for chars in re.findall(r'MAKE_SQLSTATE\(([^)]*)\)', text)}
    return raised


def check_sqlstates(docs, reference):
    """Every SQLSTATE the manual names is raised by zklock or, for what the
    manual says it is, by PostgreSQL; the README's short error table lists
    the reference's SQLSTATEs."""
    problems = []
    known = raised_sqlstates() | POSTGRES_RAISES
    for doc in docs + [SRC / 'CHANGELOG.md']:
        for no, line in enumerate(doc.read_text().splitlines(), 1):
            for code in re.findall(r'`([0-9][0-9A-Z]{4})`', line):
                if code not in known:
                    problems.append('%s:%d: SQLSTATE %s is raised by nothing'
                                    % (doc.relative_to(SRC), no, code))
    long_table = {c[0].split()[0].strip('`') for c in table_rows(reference, r'`[0-9][0-9A-Z]{4}`.*')}
    short_table = {c[0].strip('`') for c in table_rows((SRC / 'README.md').read_text(),
                                                      r'`[0-9][0-9A-Z]{4}`')}
    if long_table != short_table:
        problems.append('README.md: its error table lists %s, the reference\'s %s'
                        % (' '.join(sorted(short_table)), ' '.join(sorted(long_table))))
    return problems


def check_ci_table():
    """The README's table of majors says what test/run-all.sh runs on each:
    its suites, and which TAP scripts (all, or a list)."""
    problems = []
    run_all = (SRC / 'test' / 'run-all.sh').read_text()
    matrix = re.search(r'^matrix=\((.*?)^\)', run_all, re.S | re.M).group(1)
    block = re.search(r'^declare -A tap_subset=\((.*?)^\)', run_all, re.S | re.M).group(1)
    subset = {m: sorted(re.findall(r'test/tap/(\d{3})_', files))
              for m, files in re.findall(r'\[(\d+)\]="([^"]*)"', block)}
    readme = (SRC / 'README.md').read_text()
    for entry in re.findall(r'"([^"]+)"', matrix):
        major, _, *suites = entry.split()
        rows = list(table_rows(readme, r'%s( \(.*\))?' % major))
        if len(rows) != 1:
            problems.append('README.md: the CI table has %d rows for PostgreSQL %s'
                            % (len(rows), major))
            continue
        runs = rows[0][-1]
        want = {'pg_regress': 'pg_regress', 'isolation': 'isolation',
                'nemesis': 'nemesis run', 'package': 'Debian package'}
        for suite, words in want.items():
            if (suite in suites) != (words in runs):
                problems.append('README.md: the CI table says PostgreSQL %s runs "%s"; '
                                'test/run-all.sh %s' % (major, runs, 'runs %s' % suite
                                                        if suite in suites else 'does not run %s' % suite))
        if 'TAP' not in suites:
            tap = None
        elif major in subset:
            tap = 'TAP tests %s' % ', '.join(subset[major])
        else:
            tap = 'all TAP tests'
        if tap is None and 'TAP' in runs or tap is not None and tap not in runs:
            problems.append('README.md: the CI table says PostgreSQL %s runs "%s"; '
                            'test/run-all.sh runs %s' % (major, runs, tap or 'no TAP test'))
    return problems


def check_install_line():
    """The README's line that installs what a build from source needs names
    the server too (postgresql-NN of the native major): its next steps
    restart a server that a bare machine would not have."""
    run_all = (SRC / 'test' / 'run-all.sh').read_text()
    native = re.search(r'^\s*"(\d+) native ', run_all, re.M).group(1)
    lines = [line for line in (SRC / 'README.md').read_text().splitlines()
             if line.startswith('apt-get install ')
             and 'postgresql-server-dev-%s' % native in line.split()]
    if len(lines) != 1:
        return ['README.md: %d lines install postgresql-server-dev-%s, not one'
                % (len(lines), native)]
    if 'postgresql-%s' % native not in lines[0].split():
        return ['README.md: "%s" installs no PostgreSQL server (postgresql-%s)'
                % (lines[0], native)]
    return []


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

    problems += check_settings(reference)
    problems += check_sqlstates(docs, reference)
    problems += check_ci_table()
    problems += check_install_line()

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
