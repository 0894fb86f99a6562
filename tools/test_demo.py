"""The demo's checks, run as tests on the trees as they are (make check).

Runs tools/demo/run.py --no-materialize --json once and asserts that every
check passed and the facts the demo is there to show. It runs the demo's
default Nova line, the primary one (nova34), or the one DEMO_NOVA names
(DEMO_NOVA=nova for the 33 line).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

TOP = pathlib.Path(__file__).resolve().parent.parent
LINE = os.environ.get('DEMO_NOVA', 'nova34')
LINES = {'nova34': 'nova 34.0.0 + patches/nova34',
         'nova': 'nova 33.0.2 + patches/nova'}
NEEDED = ['build/%s/.git' % LINE, 'build/cyborg/.git',
          'build/venvs/%s/bin/python' % LINE,
          'build/venvs/cyborg/bin/python']


class TestDemo(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if LINE not in LINES:
            raise AssertionError('DEMO_NOVA=%r: the demo runs nova34 (the '
                                 'default) or nova' % LINE)
        missing = [p for p in NEEDED if not (TOP / p).exists()]
        if missing:
            raise unittest.SkipTest(
                'no %s: materialize the series and make the venvs first '
                '(make materialize venv)' % ', '.join(missing))
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / 'demo.json'
            proc = subprocess.run(
                [sys.executable, str(TOP / 'tools' / 'demo' / 'run.py'),
                 '--no-materialize', '--json', str(out)],
                cwd=TOP, capture_output=True, text=True)
            cls.output = proc.stdout + proc.stderr
            cls.returncode = proc.returncode
            cls.record = json.loads(out.read_text()) if out.exists() else {}

    def steps(self):
        return self.record['nova']['steps']

    def test_says_which_lines_it_runs(self):
        self.assertIn('running %s with cyborg 17.0.0 + patches/cyborg'
                      % LINES[LINE], self.output)

    def test_every_check_passed(self):
        failed = [c for c in self.record.get('checks', []) if not c['ok']]
        self.assertEqual([], failed, self.output[-3000:])
        self.assertEqual(0, self.returncode, self.output[-3000:])
        self.assertGreaterEqual(len(self.record['checks']), 25)
        self.assertIn('demo: all %d checks passed' % len(
            self.record['checks']), self.output)

    def test_allocation_on_cyborg_provider(self):
        cy = self.record['cyborg']
        (rp,) = [p for p in cy['providers']
                 if 'CUSTOM_MDEV_MTTY_2' in p['inventories']]
        self.assertEqual(['CUSTOM_MTTY', 'OWNER_CYBORG'], rp['traits'])
        self.assertEqual({'CUSTOM_MDEV_MTTY_2': 1},
                         self.steps()['3']['allocation'][rp['name']])

    def test_cyborg_reports_the_shared_parent(self):
        cy = self.record['cyborg']
        inventories = {p['name']: p['inventories'] for p in cy['providers']}
        # mtty-2: 11 available + the operator's mdev, which is not Cyborg's
        self.assertEqual(
            {'CUSTOM_MDEV_MTTY_2': {'total': 11, 'reserved': 0,
                                    'max_unit': 11}},
            inventories['compute1_mdev_0000:41:00.0_mtty-2'])
        self.assertEqual(
            {'VGPU': {'total': 4, 'reserved': 0, 'max_unit': 4}},
            inventories['compute1_mdev_0000:41:00.0_mtty-1'])
        # and the driver says the two types share the parent
        self.assertEqual(1, len([w for w in cy['warnings']
                                 if 'share its capacity' in w]))

    def test_hostdev_is_the_arqs_mdev_persistent_and_autostarted(self):
        step = self.steps()['3']
        uuid = step['arq']['attach_handle_uuid']
        self.assertIn(uuid, {h['uuid']
                             for h in self.record['cyborg']['attach_handles']})
        (hostdev,) = step['hostdevs']
        self.assertIn('type="mdev"', hostdev)
        self.assertIn('uuid="%s"' % uuid, hostdev)
        (dev,) = [d for d in step['node_devices'] if d['uuid'] == uuid]
        self.assertEqual(
            ('pci_0000_41_00_0', 'mtty-2', True, True, True),
            (dev['parent'], dev['type'], dev['active'], dev['persistent'],
             dev['autostart']))
        # claimed by the server, as nova-compute's own mdev
        claim = dict(step['claim'])
        self.assertTrue(claim.pop('node'))
        self.assertEqual(
            {'instance': step['server']['id'], 'parent': 'pci_0000_41_00_0',
             'type': 'mtty-2', 'owned': True}, claim)

    def test_nova_vgpu_not_on_cyborg_provider(self):
        step = self.steps()['4']
        cyborg_rps = {p['name'] for p in self.record['cyborg']['providers']
                      if p['parent_uuid']}
        # one of Cyborg's providers offers VGPU, and it is not used
        self.assertTrue(cyborg_rps & set(step['raw_vgpu_candidates']))
        self.assertEqual(set(), cyborg_rps & set(step['allocation']))
        self.assertEqual({'VGPU': 1},
                         step['allocation']['compute1_pci_0000_42_00_0'])

    def test_capacity_back_after_delete(self):
        delete = self.steps()['5']['delete']
        self.assertEqual((1, 0), (delete['before']['placement'],
                                  delete['after']['placement']))
        self.assertEqual({'mtty-1': 22, 'mtty-2': 11},
                         delete['after']['parent']['0000:41:00.0'])
        self.assertEqual([], delete['handles_in_use'])

    def test_xml_valid(self):
        results = self.steps()['6']['results']
        self.assertEqual({'domain', 'nodedev'}, {r['kind'] for r in results})
        self.assertEqual([], [r for r in results if r['errors']])


if __name__ == '__main__':
    unittest.main()
