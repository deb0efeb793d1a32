"""`python -m lookupkit` runs the umbrella command, as `lookupkit` does."""

from .cli.main import main

main()
