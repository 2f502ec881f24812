#!/usr/bin/python3
"""Runs rdma-core's own Python test suite (Debian's python3-pyverbs ships it
in /usr/share/doc/rdma-core/tests) unmodified, over whatever libibverbs.so.1
the dynamic linker finds first, and judges the outcome against a list of
expected skips kept in Braid's tree.

  run_suite.py TESTS_DIR EXPECTED_SKIPS [--dev braid0] [--list]

TESTS_DIR is a copy of the suite with its .gz files unpacked. Each line of
EXPECTED_SKIPS is a glob over test ids (tests.test_qp.QPTest.test_create_ud_qp*)
then the reason; a "?" before the glob lets the test pass too (a skip that
depends on the host). Exit status 0 only when no test failed or erred,
every skipped test is listed, and no listed test passed (a feature that
arrived takes its tests off the list).
"""
import fnmatch
import importlib.machinery
import os
import sys
import unittest


def load_expected(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            pattern, _, reason = line.partition(' ')
            if not reason.strip():
                sys.exit(f'{path}:{n}: an expected skip needs a reason')
            may_pass = pattern.startswith('?')
            out.append((pattern.lstrip('?'), reason.strip(), may_pass))
    return out


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcome = {}  # test id -> (kind, detail)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcome[test.id()] = ('pass', '')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcome[test.id()] = ('skip', reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcome[test.id()] = ('fail', self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcome[test.id()] = ('error', self._exc_info_to_string(err, test))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcome[test.id()] = ('pass', 'expected failure')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcome[test.id()] = ('fail', 'unexpected success')


def main():
    args = [a for a in sys.argv[1:] if a != '--list']
    if len(args) < 2:
        sys.exit(__doc__)
    tests_dir, skips_path, rest = os.path.abspath(args[0]), args[1], args[2:]
    expected = load_expected(skips_path)
    # As the suite's own run_tests.py: its directory on the path, its
    # argument parser fed first, then the package loaded as 'tests'.
    sys.path.insert(0, tests_dir)
    sys.argv = [sys.argv[0]] + rest
    from args_parser import parser
    parser.parse_args()
    package = importlib.machinery.SourceFileLoader(
        'tests', os.path.join(tests_dir, '__init__.py')).load_module()
    suite = unittest.TestLoader().loadTestsFromModule(package)
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=1, stream=sys.stdout)
    result = runner.run(suite)

    problems = []
    counts = {'pass': 0, 'skip': 0, 'fail': 0, 'error': 0}
    for test_id, (kind, detail) in sorted(result.outcome.items()):
        counts[kind] += 1
        listed = [(r, m) for p, r, m in expected if fnmatch.fnmatchcase(test_id, p)]
        if kind == 'skip' and not listed:
            problems.append(f'not in the expected skips: {test_id}: {detail}')
        elif kind == 'pass' and listed and not all(m for _, m in listed):
            problems.append(f'listed as an expected skip but passed (take it off the list): '
                            f'{test_id}')
        elif kind in ('fail', 'error'):
            problems.append(f'{kind}: {test_id}')
    if '--list' in sys.argv[1:] or os.environ.get('RDMA_SUITE_LIST'):
        for test_id, (kind, detail) in sorted(result.outcome.items()):
            print(f'{kind:5} {test_id} {detail if kind == "skip" else ""}')
    print(f'rdma-core suite: {counts["pass"]} passed, {counts["fail"]} failed, '
          f'{counts["error"]} errors, {counts["skip"]} skipped of {len(result.outcome)}')
    for p in problems:
        print('rdma-core suite: ' + p)
    if problems:
        print('rdma-core suite: FAIL')
        return 1
    print('rdma-core suite: PASS (every skip listed in ' + os.path.basename(skips_path) + ')')
    return 0


if __name__ == '__main__':
    sys.exit(main())
