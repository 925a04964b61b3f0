"""The model boundary: the OpenAI Responses API client (`client`, `responses`), the chat
completions adapter, rate limits, the transport, and the shapes NeMo Gym exchanges.

Cut-off: speaks HTTP to a model and returns typed answers; knows nothing of environments,
verifiers or the store. Tier 1, beside `verifiers` and `store`."""

__tier__ = 1

__all__ = [
    "chat_adapter",
    "client",
    "errors",
    "nemo_gym_shapes",
    "open_files",
    "responses",
    "server_info",
    "sse",
    "text_completions",
]
