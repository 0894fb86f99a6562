# The README's commands. Everything lives in tools/series; see README.md.
SERIES := python3 tools/series
# The three series: the 33 line, Cyborg's, the upstream track (bases.ini).
PROJECTS := nova cyborg nova34

.PHONY: check check-suites preflight demo materialize export verify venv

# The test command (what .ci/run runs): the preflight, the three series
# materialized, verify and the suites while the lab's tiers 1, 2 and 3
# run (root, Debian 12 on amd64), the lab's checks, last the tooling's
# tests. Its last line is the total:
# "N passed, M failed, S skipped, X expected failures".
check:
	$(SERIES) check

# The same without the lab, for a machine without root or Debian.
check-suites:
	$(SERIES) check --suites

# Only the preflight of `make check` (ARGS=--suites: of check-suites).
preflight:
	python3 tools/preflight.py $(ARGS)

# The demo: both series end to end in an embedded test cloud (doc/demo.md).
# make demo ARGS="--verbose --json demo.json"
demo:
	python3 tools/demo/run.py $(ARGS)

materialize:
	for p in $(PROJECTS); do $(SERIES) materialize $$p || exit 1; done

export:
	for p in $(PROJECTS); do $(SERIES) export $$p || exit 1; done

venv:
	for p in $(PROJECTS); do $(SERIES) venv $$p || exit 1; done

# (every series verified, even after one that does not apply: its patches
# that apply are linted, in the venv of its base)
verify:
	rc=0; for p in $(PROJECTS); do \
	    $(SERIES) materialize $$p || rc=1; $(SERIES) venv $$p || rc=1; \
	    $(SERIES) verify $$p || rc=1; \
	done; exit $$rc
