"""Scale: caches built from synthetic corpora of growing size within one memory budget (run, over the Zipf-Markov
generator of gen), and `lookup-create --ray local` against the local build (ray) -> SCALE.md."""
