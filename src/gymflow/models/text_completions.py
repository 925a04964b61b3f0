"""`model.kind: completions`: a `/v1/completions` server (llama.cpp, vLLM, TGI) sent one text
prompt that gymflow renders from the conversation with a chat template the run names.

Why: the chat template decides whether a checkpoint answers a turn or copies it back. A base
checkpoint was trained on none; an instruct one served under the wrong one echoes its prompt. A
server fixes its template when it starts and rarely says which. Rendered here, the template is a
recorded factor of the run that can change alone, on the same server and weights: the decision's
chat-format experiment does exactly that (`analysis/hypotheses.py`).

The rendered prompt goes out as `prompt` with the run's sampling and the template's stop strings,
so the answer ends with the turn. The answer (`choices[0].text`) comes back as a chat completion
and goes through the chat adapter, so harnesses and the store read it as any other answer. A text
prompt has no place for tools: a request that offers them is refused, not sent without them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict

from gymflow.models.chat_adapter import request_to_chat
from gymflow.models.errors import ClientRequestError


@dataclass(frozen=True)
class ChatTemplate:
    """How each turn is written, what opens the model's turn, and the strings that end it."""

    turn: dict[str, str]  # role -> format with {content}
    answer_prefix: str
    stop: tuple[str, ...]
    #: what opens or closes a turn under this template (its markers, the tokenizer's special
    #: tokens); checked at a line's start where the marker is plain text (alpaca)
    reserved: tuple[str, ...] = ()


#: by the names `model.chat_template` takes (core/config.py)
TEMPLATES: dict[str, ChatTemplate] = {
    # the turns' text alone, as a base checkpoint read its training data
    "plain": ChatTemplate(
        turn={"system": "{content}\n\n", "user": "{content}\n\n", "assistant": "{content}\n\n"},
        answer_prefix="",
        stop=(),
    ),
    # SmolLM2, Qwen and most instruct checkpoints trained on ChatML
    "chatml": ChatTemplate(
        turn={
            role: f"<|im_start|>{role}\n{{content}}<|im_end|>\n"
            for role in ("system", "user", "assistant")
        },
        answer_prefix="<|im_start|>assistant\n",
        stop=("<|im_end|>",),
        reserved=("<|im_start|>", "<|im_end|>", "<|endoftext|>"),
    ),
    # Gemma's instruct checkpoints: no system role, so a system turn is a user turn
    "gemma": ChatTemplate(
        turn={
            "system": "<start_of_turn>user\n{content}<end_of_turn>\n",
            "user": "<start_of_turn>user\n{content}<end_of_turn>\n",
            "assistant": "<start_of_turn>model\n{content}<end_of_turn>\n",
        },
        answer_prefix="<start_of_turn>model\n",
        stop=("<end_of_turn>",),
        reserved=("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"),
    ),
    "alpaca": ChatTemplate(
        turn={
            "system": "{content}\n\n",
            "user": "### Instruction:\n{content}\n\n",
            "assistant": "### Response:\n{content}\n\n",
        },
        answer_prefix="### Response:\n",
        stop=("### Instruction:",),
        reserved=("\n### Instruction:", "\n### Response:", "\n### Input:"),
    ),
}


def render(template: str, messages: list[dict[str, Any]]) -> str:
    """The conversation as one prompt ending where the model's answer begins. A message that
    holds one of the template's markers is refused (ClientRequestError), not sent: written
    into the prompt, a task's text could open a turn the conversation does not have (a forged
    system turn, an answer put in the model's mouth)."""
    spec = TEMPLATES[template]
    parts = []
    for at, message in enumerate(messages):
        content = message.get("content") or ""
        found = next((m for m in spec.reserved if m in "\n" + content), None)
        if found is not None:
            raise ClientRequestError(
                f"chat template {template!r}: message {at} ({message['role']}) holds the "
                f"template's marker {found.strip()!r}, which would open or close a turn; not sent"
            )
        parts.append(spec.turn[message["role"]].format(content=content))
    return "".join(parts) + spec.answer_prefix


def request_to_text(body: dict[str, Any], template: str) -> dict[str, Any]:
    """A Responses API request body as a `/v1/completions` one under `template`."""
    if body.get("tools"):
        raise ClientRequestError(
            f"model.kind completions (chat template {template!r}) cannot offer tools: a text "
            "prompt has no place for them; use chat_completions or responses for this harness"
        )
    chat = request_to_chat(body)
    roles = {m["role"] for m in chat["messages"]} - set(TEMPLATES[template].turn)
    if roles:
        raise ClientRequestError(
            f"chat template {template!r} has no turn for role(s) {', '.join(sorted(roles))}"
        )
    text = {key: value for key, value in chat.items() if key != "messages"}
    text["prompt"] = render(template, chat["messages"])
    if TEMPLATES[template].stop:
        text["stop"] = list(TEMPLATES[template].stop)
    return text


_OPEN = ConfigDict(extra="allow", strict=True)


@with_config(_OPEN)
class _TextChoice(TypedDict):
    text: str
    finish_reason: NotRequired[str | None]


@with_config(_OPEN)
class TextCompletion(TypedDict):
    id: str
    model: str
    choices: Annotated[list[_TextChoice], Field(min_length=1)]
    usage: NotRequired[dict[str, Any] | None]


TEXT_COMPLETION = TypeAdapter(TextCompletion)


def text_to_chat(completion: dict[str, Any]) -> dict[str, Any]:
    """A validated (`TEXT_COMPLETION`) text completion as the chat completion it answers."""
    choice = completion["choices"][0]
    chat: dict[str, Any] = {
        key: value for key, value in completion.items() if key not in ("choices", "object")
    }
    chat["choices"] = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": choice["text"]},
            "finish_reason": choice.get("finish_reason"),
        }
    ]
    return chat
