"""A stored trajectory as the report shows it: every item kind, and bounded whatever its size."""

from __future__ import annotations

import json

from gymflow.reports.trajectory import BUDGET, MAX_TEXT, blocks


def test_every_item_kind_becomes_a_block():
    items = [
        {"type": "message", "role": "user", "content": "question"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "add", "arguments": '{"a": '},
        {"type": "function_call_output", "call_id": "c1", "output": "2"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "2"}]},
        {"type": "web_search_call", "status": "done"},
    ]
    shown, left_out = blocks(json.dumps(items))
    assert left_out == 0
    assert [b.kind for b in shown] == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "message",
        "other",
    ]
    assert shown[2].text == '{\n  "a": 1\n}' and shown[2].note is None
    assert shown[3].text == '{"a": ' and shown[3].note == "arguments are not valid JSON"
    assert shown[2].extra["call_id"] == shown[4].extra["call_id"] == "c1"
    assert shown[5].title == "assistant" and shown[5].text == "2"


def test_a_huge_trajectory_is_clipped_to_the_budget():
    items = [{"type": "message", "role": "assistant", "content": "<" * 50_000}] * 500
    shown, left_out = blocks(json.dumps(items))
    assert all(b.clipped and len(b.text) == MAX_TEXT for b in shown)
    assert sum(len(b.text) for b in shown) <= BUDGET + MAX_TEXT
    assert left_out == 500 - len(shown)


def test_unreadable_trajectory_json_is_shown_not_fatal():
    shown, _ = blocks('[{"type": "message", "content": ')
    assert shown[0].kind == "other" and shown[0].title == "unreadable trajectory JSON"
