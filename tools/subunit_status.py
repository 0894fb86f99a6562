"""Print {test id: status} of one run stored by stestr, as JSON.

Run with a project's venv python (python-subunit and testtools are there):

    build/venvs/nova/bin/python tools/subunit_status.py build/nova/.stestr/3

The statuses are subunit's: success, fail, skip, xfail, uxsuccess (and
inprogress for a test whose worker died before it ended). A class-level
fixture that failed or skipped is one entry such as
"setUpClass (nova.tests.unit.test_x.TestY)"; tools/testsel.py counts it for
each test of that class.
"""

import json
import sys

import subunit
import testtools


def statuses(path):
    found = {}

    def on_test(test):
        found[test['id']] = test['status']

    # (stestr's file repository stores subunit v1, as stestr reads it)
    result = testtools.ExtendedToStreamDecorator(
        testtools.StreamToDict(on_test))
    with open(path, 'rb') as f:
        result.startTestRun()
        try:
            subunit.ProtocolTestCase(f).run(result)
        finally:
            result.stopTestRun()
    return found


if __name__ == '__main__':
    json.dump(statuses(sys.argv[1]), sys.stdout)
