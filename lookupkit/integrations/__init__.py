"""Drop-in drafters for real inference engines, and what both adapters share.

`llama_model` is the one layer over llama-cpp-python's low-level API every loop stands on (a batch, the model,
open_model, the verify step, the draft check, why a generation stopped). `lookupkit.integrations.llama_cpp`
(lookupkit's own greedy loop, `generate()` in `llama_generate`, and llama-cpp-python's draft-model hook) and
`lookupkit.integrations.transformers` (transformers' `generate(custom_generate=...)`) import their
engine lazily, so importing this package costs nothing beyond lookupkit itself; `calibrate` measures
what one more verified token costs on a GGUF model, through generate()'s own verify step, and `compare`
pairs plain and drafted runs into `lookupkit generate`'s verdict; `model_corpus` writes the model's own
greedy outputs of a prompt set as a corpus (`lookupkit model-corpus`).

An adapter builds its Drafter and loads the compiled kernels in a background thread from construction
on (`lookupkit.warmup`; `open_model` starts the default kernels' warm-up and reads the model's
vocabulary meanwhile), so the engine's own model load hides them; the first draft waits for that.

Engines hand the drafter the whole history at every call: `session.DraftSession` turns that into the
Drafter's incremental calls; `engines` holds the lazy imports and the vocabulary check both share.

Threads: a StaticCache is read-only once open, so any number of sessions in any threads may share one
mapping; a session (a Drafter plus one sequence) is not safe to share between concurrent sequences.
"""
