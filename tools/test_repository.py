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


# What the repository holds at its top: the product (README, Makefile,
# bases, patches, specs, docs, tools, benchmarks, constraints, CI).
TOP_LEVEL = {'.ci', '.gitignore', 'Makefile', 'README.md', 'bases.ini',
             'bench', 'constraints', 'doc', 'patches', 'specs', 'tools'}
# Names working notes, drafts and editors' leftovers go by.
NOTE_LIKE = re.compile(r'(^|/)(wip|notes?|todo|drafts?|scratch|tmp)(/|\.|$)'
                       r'|\.(orig|rej|swp|bak)$|~$', re.I)


class RepositoryTest(unittest.TestCase):

    def setUp(self):
        self.readme = (TOP / 'README.md').read_text()

    def test_no_working_notes_are_tracked(self):
        files = tracked()
        self.assertEqual([], tracked('wip'))
        self.assertEqual([], sorted({f.split('/')[0] for f in files} -
                                    TOP_LEVEL))
        self.assertEqual([], [f for f in files if NOTE_LIKE.search(f)])

    def test_the_patches_are_the_series_and_their_cover_letters(self):
        # (no scratch patch beside a series)
        self.assertEqual(['patches/cyborg/series', 'patches/nova/series',
                          'patches/nova34/series'],
                         sorted(tracked('patches/*/series')))
        for series in tracked('patches/*/series'):
            folder = pathlib.Path(series).parent
            listed = [line.strip() for line in (TOP / series).read_text(
            ).splitlines() if line.strip() and not line.startswith('#')]
            self.assertEqual(
                sorted(['series', '0000-cover-letter.txt'] + listed),
                sorted(pathlib.Path(f).name for f in tracked(str(folder))))

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
                     'warm', 'cold', 'installs on the host'):
            self.assertIn(word, first)

    def test_the_readme_names_every_makefile_target(self):
        makefile = (TOP / 'Makefile').read_text()
        targets = re.findall(r'^([a-z-]+):', makefile, re.M)
        self.assertIn('check-suites', targets)
        for target in targets:
            self.assertIn(target, self.readme)


if __name__ == '__main__':
    unittest.main()
