"""The suite's hypothesis profiles: under CI (CI set) every property test draws the same examples on every
run (derandomized, no example database), so that only a change to the code or the tests turns CI red;
elsewhere each run explores new examples and keeps its failures. LOOKUPKIT_HYPOTHESIS names a profile
to use instead (ci or explore)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
PROFILE = os.environ.get("LOOKUPKIT_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "explore")
settings.load_profile(PROFILE)
