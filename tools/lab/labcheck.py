"""Named checks for the tier-2 guest scripts (stdlib only).

Each check prints one line, "PASS <name> (<seconds>s): <detail>" or
"FAIL <name> (<seconds>s): <why>"; tools/lab/run.py counts them against
the scripts' plans (plans.py). A script reports its checks by key through
Checks, and ends with Checks.finish(), whose "END <script>" line says that
it ran to its end.
"""

import subprocess
import time
import traceback

results = []


class Failed(Exception):
    """A check's expectation did not hold."""


def expect(cond, why):
    if not cond:
        raise Failed(why)


def check(name, fn, raises=None):
    """Run fn(); it passes if it returns (its value is the detail), or,
    with raises=(exception type, [substrings]), if it raises that type
    with every substring in its message."""
    start = time.perf_counter()
    ok, detail, value = False, '', None
    try:
        value = fn()
        if raises:
            detail = 'no %s raised (returned %r)' % (
                raises[0].__name__, value)
        else:
            ok, detail = True, '' if value is None else str(value)
    except Failed as e:
        detail = str(e)
    except Exception as e:
        msg = str(e).replace('\n', ' ')
        if raises and isinstance(e, raises[0]):
            missing = [s for s in raises[1] if s not in msg]
            ok = not missing
            detail = '%s: %s%s' % (type(e).__name__, msg, (
                ' (message lacks %r)' % missing) if missing else '')
        else:
            where = traceback.format_exc().strip().splitlines()[-3:-1]
            detail = '%s: %s | %s' % (type(e).__name__, msg,
                                      ' <- '.join(where))
    results.append(ok)
    print('%s %s (%.2fs): %s' % ('PASS' if ok else 'FAIL', name,
                                 time.perf_counter() - start,
                                 detail[:700]), flush=True)
    return value if ok else None


def wait(pred, timeout=10.0, step=0.1):
    """Poll pred() until it is true (libvirt updates device lists late)."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > end:
            return value
        time.sleep(step)


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=60).stdout


def read(path):
    with open(path) as f:
        return f.read().strip()


class Checks:
    """The planned checks of one script (plans.TIER2[script]), run by key."""

    def __init__(self, script, plan):
        self.script = script
        self.plan = plan
        self.done = {}

    def __call__(self, key, fn, raises=None):
        """check() the planned check `key`; returns what check() does."""
        value = check(self.plan[key], fn, raises=raises)
        self.done[key] = results[-1]
        return value

    def finish(self, why=None):
        """Report each planned check that did not run as a FAIL (why: the
        reason), then the END line; returns the script's exit code."""
        for key, name in self.plan.items():
            if key not in self.done:
                results.append(False)
                print('FAIL %s (0.00s): not run: %s' % (
                    name, why or 'the script did not get to it'),
                    flush=True)
        print('END %s' % self.script, flush=True)
        return 0 if all(results) else 1
