"""The engines bench on the code task (issue 15): the policy with and without the suffix source (run ->
ENGINES_CODE.md via report)."""

