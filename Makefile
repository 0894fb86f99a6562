# The README's commands. Everything lives in tools/series; see README.md.
SERIES := python3 tools/series

.PHONY: check demo materialize export verify venv

# The test command: materialize both series, verify them, run the tests.
# Last line: "N passed, M failed".
check:
	$(SERIES) check

# The demo: both series end to end in an embedded test cloud (README "Demo").
# make demo ARGS="--verbose --json demo.json"
demo:
	python3 tools/demo/run.py $(ARGS)

materialize:
	$(SERIES) materialize nova
	$(SERIES) materialize cyborg

export:
	$(SERIES) export nova
	$(SERIES) export cyborg

verify: materialize venv
	$(SERIES) verify nova
	$(SERIES) verify cyborg

venv:
	$(SERIES) venv nova
	$(SERIES) venv cyborg
