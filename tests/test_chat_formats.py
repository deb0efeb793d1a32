"""llama.cpp's built-in chat formats as `lookupkit serve --no-jinja` renders them (serve.chat.LEGACY) and how a
template's text is matched to one (llama_chat_detect_template's order), on strings worked by hand from
src/llama-chat.cpp's rules (Gemma's, ChatML's: recorded from llama-server b11434 in test_serve_chat_gemma)."""

from __future__ import annotations

import pytest

from lookupkit.serve.chat import CHATML_SOURCE, LEGACY, detect

CHAT = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Again"}]


def test_each_format_by_hand():
    assert LEGACY["llama3"](CHAT) == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Say hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nAgain<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert LEGACY["phi3"](CHAT[1:2]) == "<|user|>\nSay hi<|end|>\n<|assistant|>\n"
    assert LEGACY["zephyr"](CHAT[1:2]) == "<|user|>\nSay hi<|endoftext|>\n<|assistant|>\n"
    assert LEGACY["vicuna"](CHAT) == " Be brief. \n\nUSER: Say hi\nASSISTANT: Hi!</s>\nUSER: Again\nASSISTANT:"
    assert LEGACY["deepseek"](CHAT[1:3]) == "### Instruction:\nSay hi\n### Response:\nHi!\n<|EOT|>\n### Response:\n"
    assert LEGACY["chatml"](CHAT[:2]) == "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n"
    # Gemma: no system turn (its stripped text opens the next user turn), "model" for the assistant, contents stripped
    assert LEGACY["gemma"](CHAT) == ("<start_of_turn>user\nBe brief.\n\nSay hi<end_of_turn>\n<start_of_turn>model\nHi!"
                                     "<end_of_turn>\n<start_of_turn>user\nAgain<end_of_turn>\n<start_of_turn>model\n")


@pytest.mark.parametrize("source, name", [
    ("gemma", "gemma"), ("chatml", "chatml"), (CHATML_SOURCE, "chatml"),
    ("{{ '<|im_start|>' + m.role + '<|im_sep|>' }}", "phi4"),  # checked before ChatML, as llama.cpp does
    ("{{ bos_token }}<start_of_turn>{{ role }}", "gemma"), ("[INST] {{ c }} [/INST]", "mistral or llama2"),
    ("mistral-v7", "mistral or llama2"), ("<|start_header_id|>{{ r }}<|end_header_id|>", "llama3"),
    ("<|user|>{{ c }}<|end|><|assistant|>", "phi3"), ("<|user|>{{ c }}<|endoftext|>", "zephyr"),
    ("{{ messages }}", None),
])
def test_a_template_is_matched_in_llama_cpps_order(source, name):
    assert detect(source) == name
