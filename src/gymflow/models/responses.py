"""The slice of the OpenAI Responses API that gymflow speaks: input items, tools, output, usage.

Items stay plain dicts inside gymflow (they are stored as JSON verbatim); these schemas validate
what crosses the boundary from a server."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter, with_config
from typing_extensions import TypedDict

# TypedDicts, not models: a validated answer stays the plain dict the harnesses and the store use,
# and validating one costs a few µs against ~10 µs for the equivalent BaseModel tree (measured on
# bench/ceiling.py's answer). Every level keeps the keys it does not name (`extra="allow"`), and
# every type named is checked strictly (no "5" for 5, no 42 for a text): an answer that does not
# fit is a malformed response, never a harness crash further on.
_OPEN = ConfigDict(extra="allow", strict=True)
#: A token count past this is no count (a hostile 2**64 - 1 stopped the whole run when the store
#: refused it as BIGINT): the answer is malformed. Sums over a run stay exact and in range.
MAX_TOKENS = 2**53
_Count = Annotated[int, Field(ge=0, lt=MAX_TOKENS)]


def _tagged(known: frozenset[str]):
    """A discriminator on `type` that sends unknown types to the open `other` schema, so an item
    type this module does not know is kept as it came, and a non-object fails as malformed."""

    def tag(value: Any) -> str | None:
        if not isinstance(value, dict):
            return None
        kind = value.get("type")
        return kind if kind in known else "other"

    return Discriminator(tag)


@with_config(_OPEN)
class InputTokensDetails(TypedDict):
    cached_tokens: NotRequired[_Count | None]


@with_config(_OPEN)
class OutputTokensDetails(TypedDict):
    reasoning_tokens: NotRequired[_Count | None]


@with_config(_OPEN)
class Usage(TypedDict):
    input_tokens: _Count
    output_tokens: _Count
    total_tokens: NotRequired[_Count | None]
    input_tokens_details: NotRequired[InputTokensDetails | None]
    output_tokens_details: NotRequired[OutputTokensDetails | None]


@with_config(_OPEN)
class _Typed(TypedDict):
    type: str


@with_config(_OPEN)
class TextPart(TypedDict):
    type: Literal["output_text", "text"]
    text: str


@with_config(_OPEN)
class RefusalPart(TypedDict):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[
    Annotated[TextPart, Tag("output_text")]
    | Annotated[TextPart, Tag("text")]
    | Annotated[RefusalPart, Tag("refusal")]
    | Annotated[_Typed, Tag("other")],
    _tagged(frozenset({"output_text", "text", "refusal"})),
]


@with_config(_OPEN)
class MessageItem(TypedDict):
    type: Literal["message"]
    role: NotRequired[str]
    content: str | list[ContentPart]


@with_config(_OPEN)
class FunctionCallItem(TypedDict):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


@with_config(_OPEN)
class SummaryPart(TypedDict):
    type: NotRequired[str]
    text: str


@with_config(_OPEN)
class ReasoningItem(TypedDict):
    type: Literal["reasoning"]
    summary: NotRequired[list[SummaryPart] | None]


OutputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[_Typed, Tag("other")],
    _tagged(frozenset({"message", "function_call", "reasoning"})),
]

#: Statuses of a response that has not (or not yet) produced its answer.
NOT_RUN = frozenset({"queued", "in_progress", "cancelled"})
#: Output items that answer: a message (even an empty one) or a tool call.
ANSWER_ITEMS = ("message", "function_call")


def unanswered(state: str | None, output: list[dict[str, Any]] | None) -> str | None:
    """Why a response that neither failed nor refused is no answer to score
    (`response_not_run`), or None. The model client and the importer read responses alike."""
    if state in NOT_RUN or not output:
        # A model that answers, even with nothing to say, answers a message; an empty output is
        # what a gateway leaves when it dropped the answer (LiteLLM's Responses bridge drops a
        # chat refusal that way), so it is no answer to score.
        held = "no output" if output is None else "empty output"
        return f"the response did not run: status {state or 'completed'}, {held}"
    if state != "incomplete" and not any(item.get("type") in ANSWER_ITEMS for item in output):
        # Only reasoning (or other non-answer items): the model thought and never answered.
        # Scoring that as an empty answer would call a model or gateway failure a reward of 0.
        held = ", ".join(sorted({str(item.get("type")) for item in output}))
        return (
            f"the response did not run to an answer: status {state or 'completed'}, its output "
            f"holds only {held} (no message, no function_call)"
        )
    return None


@with_config(_OPEN)
class Response(TypedDict):
    id: str
    object: NotRequired[Literal["response"]]
    model: str
    # absent means completed
    status: NotRequired[
        Literal["completed", "incomplete", "failed", "cancelled", "queued", "in_progress"]
    ]
    output: NotRequired[list[OutputItem] | None]  # absent or null: the response did not run
    usage: NotRequired[Usage | None]
    incomplete_details: NotRequired[dict[str, Any] | None]
    error: NotRequired[dict[str, Any] | None]


RESPONSE = TypeAdapter(Response)


def user_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def system_message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "system", "content": text}


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A Responses API function tool: `parameters` is its arguments' JSON schema."""
    return {"type": "function", "name": name, "description": description, "parameters": parameters}


def output_text(items: list[dict[str, Any]]) -> str:
    """The concatenated text of every assistant message among `items`."""
    parts: list[str] = []
    for item in items:
        if item.get("type") != "message" or item.get("role", "assistant") != "assistant":
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for part in content or ():
            if part.get("type") in ("output_text", "text"):
                parts.append(part.get("text") or "")
    return "".join(parts)


def refusal_text(items: list[dict[str, Any]]) -> str | None:
    """The text of any refusal content part among assistant messages, or None."""
    parts = [
        part.get("refusal") or ""
        for item in items
        if item.get("type") == "message"
        for part in (item.get("content") if isinstance(item.get("content"), list) else ())
        if part.get("type") == "refusal"
    ]
    return "".join(parts) if parts else None


def function_calls(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in items if item.get("type") == "function_call"]
