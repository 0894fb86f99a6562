"""The repository is the product: a README a newcomer can act on, no notes.

Run by `make check` and `make check-suites`, or alone:
    python3 -m unittest discover -s tools -p 'test_repository.py'
"""

import pathlib
import re
import subprocess
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
TOP = HERE.parent
sys.path.insert(0, str(HERE))
import preflight  # noqa: E402


def tracked(*paths):
    if not (TOP / '.git').exists():
        # (a copy that is no git checkout, such as a tarball)
        raise unittest.SkipTest('%s is no git checkout' % TOP)
    return subprocess.run(['git', '-C', str(TOP), 'ls-files', '--'] +
                          list(paths), capture_output=True, text=True,
                          check=True).stdout.split()


class RepositoryTest(unittest.TestCase):

    def setUp(self):
        self.readme = (TOP / 'README.md').read_text()

    def test_no_working_notes_are_tracked(self):
        self.assertEqual([], tracked('wip'))

    def test_the_readme_is_short(self):
        self.assertLess(len(self.readme), 15000)

    def test_the_readme_links_exist(self):
        links = re.findall(r'\]\(([^)#]+)\)', self.readme)
        self.assertTrue(links)
        for link in links:
            self.assertTrue((TOP / link).exists(), link)

    def test_the_readme_says_what_the_machine_needs_first(self):
        first = self.readme.split('\n## ')[1]
        self.assertTrue(first.startswith('What the test command needs'))
        cloud, _ = preflight.lab_modules()
        for port in cloud.all_ports():
            self.assertIn(str(port), first)
        for word in ('Debian 12', 'root', 'make check-suites', 'minutes',
                     'installs on the host'):
            self.assertIn(word, first)

    def test_the_readme_names_every_makefile_target(self):
        makefile = (TOP / 'Makefile').read_text()
        targets = re.findall(r'^([a-z-]+):', makefile, re.M)
        self.assertIn('check-suites', targets)
        for target in targets:
            self.assertIn(target, self.readme)


if __name__ == '__main__':
    unittest.main()
