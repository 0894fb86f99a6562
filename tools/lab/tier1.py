"""Tier 1: the XML the series gives libvirt, against libvirt's own schemas.

Run with the nova venv's python from build/nova (tools/lab/run.py does):
it runs Nova's Cyborg mdev functional tests in this process while recording
(not replacing) every domain and node-device XML that Nova hands to
fakelibvirt's Connection, writes them to build/lab/xml/, and validates each
distinct document with tools/libvirt_schemas.py. Broken variants of a
recorded document (bad model, bad uuid, missing type) must fail.

Output: one line per check, "PASS <name>" or "FAIL <name>: <why>".
"""

import hashlib
import pathlib
import re
import sys
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import libvirt_schemas  # noqa: E402

TESTS = 'nova.tests.functional.libvirt.test_cyborg_mdev'
OUT = HERE.parent.parent / 'build' / 'lab' / 'xml'

results = []


def check(name, errors, detail='', seconds=0.0):
    """Report one named check; errors: [] means it passed."""
    results.append(not errors)
    if errors:
        print('FAIL %s (%.2fs): %s' % (name, seconds,
                                       '; '.join(errors)[:600]), flush=True)
    else:
        print('PASS %s (%.2fs)%s' % (name, seconds,
                                     ': ' + detail if detail else ''),
              flush=True)


def record_xml():
    """Run the functional tests; return [(test id, kind, xml)] recorded."""
    # nova.tests.functional monkey patches with eventlet: import it first
    import nova.tests.functional  # noqa: F401
    from nova.tests.fixtures import libvirt as fakelibvirt

    recorded = []
    current = ['(no test)']

    def recording(kind, method):
        def wrapper(self, xml, *args, **kwargs):
            recorded.append((current[0], kind, xml))
            return method(self, xml, *args, **kwargs)
        wrapper.__wrapped__ = method
        return wrapper

    conn = fakelibvirt.Connection
    for name, kind in (('defineXML', 'domain'), ('createXML', 'domain'),
                       ('nodeDeviceCreateXML', 'nodedev'),
                       ('nodeDeviceDefineXML', 'nodedev')):
        setattr(conn, name, recording(kind, getattr(conn, name)))

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            current[0] = test.id().rsplit('.', 1)[-1]
            super().startTest(test)

    suite = unittest.defaultTestLoader.loadTestsFromName(TESTS)
    start = time.time()
    result = unittest.TextTestRunner(
        stream=sys.stderr, verbosity=0, resultclass=Result).run(suite)
    bad = ['%s: %s' % (t.id().rsplit('.', 1)[-1],
                       tb.strip().splitlines()[-1])
           for t, tb in result.failures + result.errors]
    check('tier1: %s passes while its XML is recorded' % TESTS,
          bad or ([] if result.testsRun else ['no test ran']),
          '%d tests' % result.testsRun, time.time() - start)
    return recorded


def write(recorded):
    """Write each distinct document once; return [(path, kind, xml)]."""
    if OUT.exists():
        for old in OUT.glob('*.xml'):
            old.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    seen = {}
    per_test = {}
    for test, kind, xml in recorded:
        digest = hashlib.sha1(xml.encode()).hexdigest()
        if digest in seen:
            continue
        n = per_test[test, kind] = per_test.get((test, kind), 0) + 1
        path = OUT / ('%s-%s-%d.xml' % (test, kind, n))
        path.write_text(xml)
        seen[digest] = (path, kind, xml)
    return list(seen.values())


def broken_variants(kind, xml):
    """(what is broken, xml) variants of a valid mdev document."""
    if kind == 'domain':
        hostdev = re.search(r"<hostdev[^>]*type=.mdev.[^>]*>", xml).group(0)
        uuid = re.search(r"<address uuid=.([0-9a-f-]{36}).", xml).group(1)
        return [
            ('bad model', xml.replace(
                hostdev, re.sub(r"model=.[^'\"]*.", "model='vfio-bogus'",
                                hostdev))),
            ('bad uuid', xml.replace(uuid, uuid[:-4] + 'zzzz')),
            ('missing type', xml.replace(
                hostdev, re.sub(r"\stype=.mdev.", '', hostdev))),
        ]
    uuid = re.search(r'<uuid>([^<]*)</uuid>', xml).group(1)
    return [
        ('bad uuid', xml.replace(uuid, 'not-a-uuid')),
        ('missing type', re.sub(r'<type id=[^>]*/>', '', xml)),
    ]


def main():
    libvirt_schemas.ensure_installed()
    t = time.perf_counter()
    validator = libvirt_schemas.Validator()
    compile_s = time.perf_counter() - t
    docs = write(record_xml())
    mdev_domains = [d for d in docs if d[1] == 'domain'
                    and re.search(r"<hostdev[^>]*type=.mdev.", d[2])]
    nodedevs = [d for d in docs if d[1] == 'nodedev']
    check('tier1: the tests gave libvirt domain XML with mdev hostdevs '
          'and mdev node-device XML',
          [] if mdev_domains and nodedevs else ['nothing recorded'],
          '%d distinct domain documents with mdevs, %d node-device '
          'documents' % (len(mdev_domains), len(nodedevs)))
    t = time.perf_counter()
    for path, kind, xml in docs:
        errors = getattr(validator, kind)(xml)
        check('tier1: %s valid against %s.rng%s' % (
            path.name, kind,
            ' (placeholder <name>)' if kind == 'nodedev'
            and '<name>' not in xml else ''), errors)
    per_doc_ms = (time.perf_counter() - t) * 1000 / max(len(docs), 1)
    for label, samples in (('domain', mdev_domains[:1]),
                           ('nodedev', nodedevs[:1])):
        for path, kind, xml in samples:
            for what, bad in broken_variants(kind, xml):
                errors = getattr(validator, kind)(bad)
                check('tier1: %s with a %s is refused by %s.rng' % (
                    label, what, kind),
                    [] if errors else ['the broken document validated'])
    print('tier1: schemas compiled in %.0f ms, %.2f ms per document, '
          '%d distinct documents in %s' % (
              compile_s * 1000, per_doc_ms, len(docs), OUT), flush=True)
    return 0 if all(results) else 1


if __name__ == '__main__':
    sys.exit(main())
