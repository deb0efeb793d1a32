"""Provenance moved to bench/harness.py; these names stay importable for bench/serve until it imports
lookupkit.bench.harness itself."""

from lookupkit.bench.harness import RESULTS, SHARED, git_state, machine, warm_file  # noqa: F401
