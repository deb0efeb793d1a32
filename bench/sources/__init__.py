"""Does each source pay on the model's own output? (issue 23, item 5) Replays of a model's greedy generations of
the serving bench's prompts with the policy drafting from the context alone and with each further source (a
static cache, a dynamic cache or a history kept across the prompts, a cache of the model's own outputs), the
policy's online trust on and off, priced by the model's verify-cost curve, and its section of RESULTS.md (run, whose `markdown`
renders it). generations: the model's outputs of one seed's prompts, made once."""
