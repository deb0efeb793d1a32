"""Chat messages to prompt ids, rendered as llama-cpp-python's `Llama.create_chat_completion` renders them
for the same GGUF: `Llama.__init__` picks the chat format (the GGUF's `tokenizer.chat_template`, or the
built-in format it recognises that template as, or "llama-2" when the GGUF carries none) and its
handler tokenizes the rendered text with special tokens parsed and a BOS added only if the formatter
did not write the special tokens itself. The formatter's stop strings become the request's."""

from __future__ import annotations

from ..errors import InputError
from .protocol import ApiError

TEMPLATE = "chat_template.default"  # llama-cpp-python's name for the GGUF's own template
FORMATTERS = {"chatml": "format_chatml", "mistral-instruct": "format_mistral_instruct",  # the names its guess
              "llama-3": "format_llama3", "llama-2": "format_llama2"}                     # (and fallback) can give


class ChatTemplate:
    def __init__(self, llm):
        from llama_cpp import llama_chat_format

        self.llm, self.name = llm, llm.chat_format
        if self.name == TEMPLATE:
            eos, bos = llm.token_eos(), llm.token_bos()
            text = llm._model.token_get_text
            self._format = llama_chat_format.Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"], eos_token=text(eos) if eos != -1 else "",
                bos_token=text(bos) if bos != -1 else "", stop_token_ids=[eos])
        elif self.name in FORMATTERS:
            self._format = getattr(llama_chat_format, FORMATTERS[self.name])
        else:
            raise InputError(f"llama-cpp-python chose chat format {self.name!r}, which lookupkit serve does not know "
                             f"(upgrade lookupkit, or pin llama-cpp-python to the version pyproject names)")

    def describe(self) -> str:
        return ("the GGUF's chat template" if self.name == TEMPLATE else
                f"llama-cpp-python's {self.name!r} format" + (" (the GGUF carries no chat template)"
                                                               if self.name == "llama-2" else ""))

    def render(self, messages: list[dict]) -> tuple[list[int], list[str]]:
        """(prompt ids, stop strings) for OpenAI-style messages; a template that refuses them is a 400."""
        import jinja2

        try:
            r = self._format(messages=messages)
        except (jinja2.TemplateError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise ApiError(400, f"the chat template cannot render these messages: {exc}", param="messages") from None
        try:
            raw = r.prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "the messages are not valid Unicode (a lone surrogate escape)", param="messages") from None
        ids = self.llm.tokenize(raw, add_bos=not r.added_special, special=True)
        stops = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
        return ids, stops
