"""Named checks for the tier-2 guest scripts (stdlib only).

Each check prints one line, "PASS <name> (<seconds>s): <detail>" or
"FAIL <name> (<seconds>s): <why>"; tools/lab/run.py counts them.
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
