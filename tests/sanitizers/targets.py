#!/usr/bin/env python3
"""Prints the ninja targets (output paths) that the selected tests of a configured build directory need.

    targets.py BUILD_DIR [--suite S]... [--no-suite S]... [TEST_NAME]...

Selection as `meson test` makes it: tests named, or in one of the --suite suites (all tests when neither is given),
minus those in a --no-suite suite. A test needs the targets Meson lists in its `depends` plus every build output on
its command line (dtrun, the rank program); a sanitizer build compiles only those, not `all`.
"""
import json
import os
import subprocess
import sys


def introspect(build_dir, what):
    out = subprocess.run(['meson', 'introspect', build_dir, '--' + what], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main(argv):
    if not argv or argv[0].startswith('-'):
        sys.exit(__doc__)
    build_dir = os.path.abspath(argv[0])
    suites, no_suites, names = set(), set(), set()
    args = iter(argv[1:])
    for a in args:
        if a in ('--suite', '--no-suite'):
            (suites if a == '--suite' else no_suites).add(next(args))
        else:
            names.add(a)

    def short(suite):  # meson lists suites as 'project:suite'
        return suite.split(':', 1)[-1]

    tests = introspect(build_dir, 'tests')
    targets = {t['id']: t for t in introspect(build_dir, 'targets')}
    by_file = {f: t for t in targets.values() for f in t['filename']}
    known = {t['name'] for t in tests}
    if names - known:
        sys.exit('targets.py: no such test: ' + ', '.join(sorted(names - known)))
    wanted = set()
    for t in tests:
        ts = {short(s) for s in t['suite']}
        selected = (t['name'] in names) or (ts & suites) or not (names or suites)
        if not selected or ts & no_suites:
            continue
        for dep in t.get('depends', []):
            wanted.update(targets[dep]['filename'])
        for a in t['cmd'] + t.get('args', []):
            path = a if os.path.isabs(a) else os.path.join(build_dir, a)
            if path in by_file:
                wanted.update(by_file[path]['filename'])
    print('\n'.join(sorted(os.path.relpath(f, build_dir) for f in wanted)))


if __name__ == '__main__':
    main(sys.argv[1:])
