"""Tier 1: the XML the series gives libvirt, against libvirt's own schemas.

Run with the nova venv's python from build/nova (tools/lab/run.py does):
it runs Nova's Cyborg mdev functional tests in this process while recording
(not replacing) every domain and node-device XML that Nova hands to
fakelibvirt's Connection, writes the distinct documents to build/lab/xml/
(Nova's creation time set aside: a document re-defined a second later is
the same document) and validates every one of them with
tools/libvirt_schemas.py. Broken variants of a recorded document (bad
model, bad uuid, missing type) must fail.

Output: one line per planned check (PLAN: one per kind of document, so the
count is the same in every run), "PASS <name>" or "FAIL <name>: <why>".
`tier1.py --plan` prints the planned checks' names (tools/lab/run.py
counts them even if the tests never run).
"""

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
BROKEN = {'domain': ('bad model', 'bad uuid', 'missing type'),
          'nodedev': ('bad uuid', 'missing type')}
PLAN = [
    'tier1: %s passes while its XML is recorded' % TESTS,
    'tier1: the tests gave libvirt domain XML with mdev hostdevs and mdev '
    'node-device XML',
    'tier1: every domain XML document is valid against domain.rng',
    'tier1: every node-device XML document is valid against nodedev.rng '
    '(a placeholder <name> where Nova gives none)',
] + ['tier1: %s with a %s is refused by %s.rng' % (kind, what, kind)
     for kind, whats in BROKEN.items() for what in whats]
# Nova writes the time it made a domain's XML into its metadata, to the
# second: set aside when telling documents apart.
CREATION_TIME = re.compile(r'<nova:creationTime>[^<]*</nova:creationTime>')

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
    check(PLAN[0], bad or ([] if result.testsRun else ['no test ran']),
          '%d tests' % result.testsRun, time.time() - start)
    return recorded


def distinct(recorded):
    """The distinct documents [(test, kind, xml)], in the order recorded;
    two that differ only by Nova's creation time are one."""
    seen = set()
    docs = []
    for test, kind, xml in recorded:
        key = (kind, CREATION_TIME.sub('', xml))
        if key not in seen:
            seen.add(key)
            docs.append((test, kind, xml))
    return docs


def write(docs):
    """Write each document to build/lab/xml; return [(path, kind, xml)]."""
    if OUT.exists():
        for old in OUT.glob('*.xml'):
            old.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    per_test = {}
    for test, kind, xml in docs:
        n = per_test[test, kind] = per_test.get((test, kind), 0) + 1
        path = OUT / ('%s-%s-%d.xml' % (test, kind, n))
        path.write_text(xml)
        written.append((path, kind, xml))
    return written


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
    recorded = record_xml()
    docs = write(distinct(recorded))
    mdev_domains = [d for d in docs if d[1] == 'domain'
                    and re.search(r"<hostdev[^>]*type=.mdev.", d[2])]
    nodedevs = [d for d in docs if d[1] == 'nodedev']
    check(PLAN[1], [] if mdev_domains and nodedevs else ['nothing recorded'],
          '%d distinct documents of %d recorded: %d domain documents with '
          'mdevs, %d node-device documents' % (
              len(docs), len(recorded), len(mdev_domains), len(nodedevs)))
    t = time.perf_counter()
    for kind, name in (('domain', PLAN[2]), ('nodedev', PLAN[3])):
        mine = [(path, xml) for path, k, xml in docs if k == kind]
        errors = ['%s: %s' % (path.name, '; '.join(e)) for path, e in (
            (path, getattr(validator, kind)(xml)) for path, xml in mine)
            if e]
        check(name, errors if mine else ['no %s document' % kind],
              '%d documents' % len(mine))
    per_doc_ms = (time.perf_counter() - t) * 1000 / max(len(docs), 1)
    samples = {'domain': mdev_domains[:1], 'nodedev': nodedevs[:1]}
    for kind, whats in BROKEN.items():
        variants = dict(broken_variants(kind, samples[kind][0][2])) \
            if samples[kind] else {}
        for what in whats:
            name = 'tier1: %s with a %s is refused by %s.rng' % (
                kind, what, kind)
            if what not in variants:
                check(name, ['not run: no %s document to break' % kind])
                continue
            errors = getattr(validator, kind)(variants[what])
            check(name, [] if errors else ['the broken document validated'])
    print('tier1: schemas compiled in %.0f ms, %.2f ms per document, '
          '%d distinct documents in %s' % (
              compile_s * 1000, per_doc_ms, len(docs), OUT), flush=True)
    return 0 if all(results) else 1


if __name__ == '__main__':
    if sys.argv[1:] == ['--plan']:
        print('\n'.join(PLAN))
        sys.exit(0)
    sys.exit(main())
