"""Start-up: `import lookupkit` to the first draft in fresh processes (run), this checkout against another
tree (compare), and their sections of RESULTS.md and STARTUP.md (report)."""
