"""Chat messages to a prompt, rendered as llama-server b11434 renders them for the same GGUF and flags, so a
client moved from llama-server to lookupkit serve sends the model the same text.

Which template (llama.cpp's common_chat_templates_init and the server's flags, read, not copied):
`--chat-template-file FILE` or `--chat-template NAME|TEXT` if given, else the GGUF's
`tokenizer.chat_template`, else llama-server's fallback, ChatML (a base model's GGUF carries none).
"chatml" names the fallback's source. With Jinja (the default, as llama-server's), the source is rendered by
jinja2 with `messages`, `bos_token`, `eos_token` and `add_generation_prompt`, and a BOS the template wrote
is cut when the tokenizer adds one (llama.cpp does so too: the prompt never starts with two); another
built-in name ("gemma") is then a template of its own text, so every prompt is "gemma": llama-server b11434
does exactly that (recorded), and start-up warns. With `--no-jinja` the source is matched to one of
llama.cpp's built-in formats by name or by the strings it holds (llama_chat_detect_template's order) and
rendered by that format's fixed rule (`LEGACY`).

The prompt is tokenized as llama-server tokenizes it: special tokens parsed, a BOS added where the
vocabulary says so. No stop strings are added: generation ends at an end-of-generation token, as there.
"""

from __future__ import annotations

from ..errors import InputError

# llama.cpp's fallback when a GGUF has no template (and what "chatml" names): ChatML, no system default
CHATML_SOURCE = ("{%- for message in messages -%}\n"
                 "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
                 "{%- endfor -%}\n"
                 "{%- if add_generation_prompt -%}\n"
                 "  {{- '<|im_start|>assistant\\n' -}}\n"
                 "{%- endif -%}")
GGUF_KEY = "tokenizer.chat_template"


def _chatml(msgs):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + "<|im_start|>assistant\n"


def _gemma(msgs):
    """Gemma has no system turn: the system text (stripped) opens the next user turn, two newlines after it."""
    out, system = [], ""
    for m in msgs:
        if m["role"] == "system":
            system += m["content"].strip()
            continue
        role = "model" if m["role"] == "assistant" else m["role"]
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(m["content"].strip() + "<end_of_turn>\n")
    return "".join(out) + "<start_of_turn>model\n"


def _llama3(msgs):
    return "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                   for m in msgs) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _phi3(msgs):
    return "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in msgs) + "<|assistant|>\n"


def _zephyr(msgs):
    return "".join(f"<|{m['role']}|>\n{m['content']}<|endoftext|>\n" for m in msgs) + "<|assistant|>\n"


def _vicuna(msgs):
    parts = {"system": "{}\n\n", "user": "USER: {}\n", "assistant": "ASSISTANT: {}</s>\n"}
    return "".join(parts[m["role"]].format(m["content"]) for m in msgs if m["role"] in parts) + "ASSISTANT:"


def _deepseek(msgs):
    parts = {"system": "{}", "user": "### Instruction:\n{}\n", "assistant": "### Response:\n{}\n<|EOT|>\n"}
    return "".join(parts[m["role"]].format(m["content"]) for m in msgs if m["role"] in parts) + "### Response:\n"


# llama.cpp's built-in formats lookupkit renders (--no-jinja, or named by --chat-template without Jinja)
LEGACY = {"chatml": _chatml, "gemma": _gemma, "llama3": _llama3, "phi3": _phi3, "zephyr": _zephyr,
          "vicuna": _vicuna, "deepseek": _deepseek}
# llama_chat_detect_template's tests, in its order, up to the last format above: (name, strings it needs);
# a name LEGACY lacks is a format llama.cpp knows and lookupkit does not render (refused, not misread)
DETECT = [("phi4", ("<|im_start|>", "<|im_sep|>")), ("smolvlm", ("<|im_start|>", "<end_of_utterance>")),
          ("chatml", ("<|im_start|>",)), ("mistral or llama2", ("[INST]",)), ("phi3", ("<|assistant|>", "<|end|>")),
          ("chatglm4", ("[gMASK]<sop>",)), ("falcon3 or glmedge", ("<|assistant|>", "<|user|>")),
          ("glmedge", ("<|{{ item['role'] }}|>", "<|begin_of_image|>")), ("zephyr", ("<|user|>", "<|endoftext|>")),
          ("monarch", ("bos_token + message['role']",)), ("gemma", ("<start_of_turn>",)),
          ("orion", ("'\\n\\nAssistant: ' + eos_token",)), ("openchat", ("GPT4 Correct ",)),
          ("vicuna-orca", ("USER: ", "ASSISTANT: ", "SYSTEM: ")), ("vicuna", ("USER: ", "ASSISTANT: ")),
          ("deepseek", ("### Instruction:", "<|EOT|>")), ("command-r", ("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>")),
          ("llama3", ("<|start_header_id|>", "<|end_header_id|>"))]


def detect(source: str) -> str | None:
    """The built-in format a template source is (llama.cpp's names; None: none it can tell)."""
    if source in LEGACY:
        return source
    if source.startswith("mistral"):
        return "mistral or llama2"
    return next((name for name, needs in DETECT if all(s in source for s in needs)), None)


def chosen(name: str | None = None, file=None) -> tuple[str, str] | None:
    """(source, why) of --chat-template NAME|TEXT or --chat-template-file FILE (read now: before the model
    loads), None for neither."""
    if name is not None and file is not None:
        raise InputError("give --chat-template or --chat-template-file, not both")
    if file is not None:
        return _read(file), f"--chat-template-file {file}"
    if name is not None:
        if not name.strip():
            raise InputError("--chat-template is empty: give a built-in name (chatml, gemma, ...) or a template")
        return name, f"--chat-template {name if len(name) < 40 else name[:37] + '...'}"
    return None


class ChatTemplate:
    """llm: the served Llama; given: chosen()'s (source, why), None for the GGUF's or the fallback; jinja:
    False for --no-jinja."""

    def __init__(self, llm, given: tuple[str, str] | None = None, jinja: bool = True):
        self.llm, self.jinja = llm, jinja
        gguf = llm.metadata.get(GGUF_KEY)
        if given is not None:
            self.source, self.why = given
        elif gguf:
            self.source, self.why = gguf, f"the GGUF's {GGUF_KEY}"
        else:
            self.source, self.why = "chatml", f"the GGUF has no {GGUF_KEY}: llama-server's fallback"
        if self.source == "chatml" and jinja:
            self.source = CHATML_SOURCE
        self.bos = self._text(llm.token_bos())
        self.eos = self._text(llm.token_eos())
        self.add_bos = bool(llm._model.add_bos_token())  # the tokenizer adds a BOS (llama_vocab_get_add_bos)
        if jinja:
            self.format, self._template = None, _compile(self.source)
        else:
            self.format = detect(self.source)
            if self.format not in LEGACY:
                known = f"llama.cpp's {self.format!r} format, which lookupkit does not render" if self.format else \
                    "not a format llama.cpp knows without Jinja"
                raise InputError(f"the chat template ({self.why}) is {known}: leave out --no-jinja, or give "
                                 f"--chat-template with one of {', '.join(LEGACY)}")
        try:  # a template that cannot render a plain exchange fails at start-up, not at the first request
            self.render_prompt([{"role": "user", "content": "hello"}])
        except Exception as exc:  # jinja2's errors, or whatever a template's own code raised
            raise InputError(f"the chat template ({self.why}) cannot render one user message: {exc}") from None

    def describe(self) -> str:
        """The start-up line: which template chat uses and why."""
        what = (f"built-in {self.format!r} format without Jinja" if not self.jinja else
                "ChatML" if self.source == CHATML_SOURCE else "Jinja")
        if self.jinja and self.source in LEGACY:  # (chatml became CHATML_SOURCE above)
            what += (f"; WARNING: through Jinja a built-in name is a template of its own text: every chat prompt is "
                     f"{self.source!r}, as llama-server b11434 renders it; add --no-jinja for llama.cpp's built-in "
                     f"{self.source!r} format")
        return f"{what}, from {self.why}"

    def _text(self, token: int) -> str:
        return special_piece(self.llm, token).decode("utf-8", "replace") if token >= 0 else ""

    def render_prompt(self, messages: list[dict]) -> str:
        """The prompt text for OpenAI-style messages (what /apply-template answers)."""
        if not self.jinja:
            return LEGACY[self.format]([{**m, "content": m.get("content") or ""} for m in messages])
        text = self._template.render(messages=messages, bos_token=self.bos, eos_token=self.eos,
                                     add_generation_prompt=True)
        if self.add_bos and self.bos and text.startswith(self.bos):
            text = text[len(self.bos):]  # the tokenizer adds it
        return text

    def render(self, messages: list[dict]) -> tuple[list[int], list[str]]:
        """(prompt ids, stop strings: none) for OpenAI-style messages; a template that refuses them is a 400."""
        raw = self.prompt_bytes(messages)
        return self.llm.tokenize(raw, add_bos=True, special=True), []

    def prompt_bytes(self, messages: list[dict]) -> bytes:
        import jinja2

        from .protocol import ApiError  # (here: `lookupkit serve --help` names LEGACY without pydantic)

        try:
            text = self.render_prompt(messages)
        except (jinja2.TemplateError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ApiError(400, f"the chat template cannot render these messages: {exc}", param="messages") from None
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "the messages are not valid Unicode (a lone surrogate escape)", param="messages") from None


def special_piece(llm, token: int) -> bytes:
    """A token's text with special tokens written out (llama.cpp's common_token_to_piece, as llama-server writes
    /detokenize and /tokenize's pieces): llama-cpp-python's detokenize cuts pieces over 32 bytes and a space
    after a BOS."""
    import ctypes

    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    if n < 0:  # longer than the buffer: exactly the length it needs
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:n]


def _read(file) -> str:
    from ..files import open_input

    with open_input(file, "--chat-template-file") as f:
        try:
            return f.read().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"--chat-template-file {file} is not UTF-8 text") from None


def _compile(source: str):
    """A jinja2 template in a sandbox, with the helpers HF templates call (raise_exception, strftime_now) and
    HF's block trimming."""
    import datetime

    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals.update(raise_exception=raise_exception,
                       strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise InputError(f"the chat template does not parse as Jinja: {exc} (give another --chat-template, or "
                         f"--no-jinja for a built-in format)") from None

