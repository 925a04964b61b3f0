"""The SQL of chat-format training data (`gymflow.data.chat`): the selected tasks' scored
rollouts, and their Responses API items turned into chat messages, tools and conversations, in
DuckDB. Each statement fills a temp table the next reads; `data_selected` (the kept task ids)
and `data_rollouts` (the kept rollouts) are the data package's.

Responses API items map to chat messages: a `message` keeps its role (`developer` becomes
`system`) and its text; a `function_call` becomes a tool call of the assistant message it follows
(or of a new assistant message); a `function_call_output` becomes a `tool` message; `reasoning`
items are dropped. The prompt is every message before the first assistant message; the
completion is the rest."""

from __future__ import annotations

from gymflow.store.tool_lists import expanded


def scored_rollouts_sql(flagged: str) -> str:
    """SQL (one `?`: the verifier version) for the completed, ok-verified rollouts of the
    `data_selected` tasks: ids, passed, reward, output tokens, whether `flagged` (SQL yielding
    ids) names it, and a hash of its trajectory."""
    return f"""
        SELECT r.rollout_id, r.task_id, r.repeat_index, v.passed, v.reward, r.output_tokens,
               r.rollout_id IN ({flagged}) AS flagged, md5(r.trajectory_json) AS raw
        FROM rollouts r
        JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.task_id IN (SELECT task_id FROM data_selected)
          AND r.status = 'completed' AND v.status = 'ok'
        """


# One row per kept item. The previous item comes from the list itself (a second list unnested
# beside the first) and the prompt's end from a list search, so only one window remains.
_ITEMS = """
CREATE OR REPLACE TEMP TABLE chat_items AS
WITH picked AS (
    SELECT rollout_id, items,
           coalesce(nullif(list_position(list_transform(items, lambda x:
               coalesce(x->>'type', 'message') <> 'message' OR x->>'role' = 'assistant'), true),
               0), len(items) + 1) - 1 AS replies_from
    FROM (SELECT r.rollout_id, json_extract(r.trajectory_json, '$[*]') AS items
          FROM rollouts r SEMI JOIN data_rollouts d USING (rollout_id))
),
flat AS (
    SELECT rollout_id, replies_from, unnest(items) AS item,
           unnest([NULL::JSON] || items[1:len(items) - 1]) AS before,
           unnest(range(len(items))) AS i
    FROM picked
),
typed AS (
    SELECT rollout_id, i, i < replies_from AS in_prompt, item,
           coalesce(item->>'type', 'message') AS type,
           -- a function_call right after an assistant message or another call joins it
           coalesce(item->>'type', 'message') = 'function_call'
             AND (before->>'type' = 'function_call'
                  OR (coalesce(before->>'type', 'message') = 'message'
                      AND before->>'role' = 'assistant')) AS joins
    FROM flat
)
SELECT rollout_id, i, in_prompt, type,
       max(CASE WHEN NOT joins THEN i END)
         OVER (PARTITION BY rollout_id ORDER BY i ROWS UNBOUNDED PRECEDING) AS m,
       CASE type WHEN 'function_call' THEN 'assistant'
                 WHEN 'function_call_output' THEN 'tool'
                 ELSE replace(item->>'role', 'developer', 'system') END AS role,
       CASE type
         WHEN 'message' THEN
           CASE WHEN json_type(item, '$.content') = 'VARCHAR' THEN item->>'content'
                ELSE array_to_string(json_extract_string(item, '$.content[*].text'), '') END
         WHEN 'function_call_output' THEN
           CASE WHEN json_type(item, '$.output') = 'VARCHAR' THEN item->>'output'
                ELSE json_extract(item, '$.output')::VARCHAR END
       END AS content,
       CASE WHEN type = 'function_call' THEN json_object(
           'id', item->>'call_id', 'type', 'function',
           'function', json_object('name', item->>'name', 'arguments', item->>'arguments'))
       END AS tool_call,
       CASE WHEN type = 'function_call_output' THEN item->>'call_id' END AS tool_call_id
FROM typed
WHERE type IN ('message', 'function_call', 'function_call_output')
"""

_MESSAGES = """
CREATE OR REPLACE TEMP TABLE chat_messages AS
WITH grouped AS (
    SELECT rollout_id, m, bool_and(in_prompt) AS in_prompt, first(role ORDER BY i) AS role,
           string_agg(content, '' ORDER BY i) AS content,
           list(tool_call ORDER BY i) FILTER (WHERE tool_call IS NOT NULL) AS tool_calls,
           first(tool_call_id ORDER BY i) AS tool_call_id
    FROM chat_items GROUP BY rollout_id, m
)
SELECT rollout_id, m, in_prompt,
       CASE
         WHEN role = 'tool' THEN json_object('role', 'tool', 'tool_call_id', tool_call_id,
                                             'content', coalesce(content, ''))
         WHEN len(tool_calls) > 0 THEN json_object('role', 'assistant', 'content', content,
                                                   'tool_calls', to_json(tool_calls))
         ELSE json_object('role', role, 'content', coalesce(content, ''))
       END::VARCHAR AS message
FROM grouped
"""

# The tools a task offers are the same in every repeat (the environment gives them per task):
# read them once per task, from its first kept rollout's first call.
_TOOLS = (
    """
CREATE OR REPLACE TEMP TABLE chat_tools AS
WITH first_calls AS (
    SELECT task_id, """
    + expanded("request")
    + """ AS request
    FROM (
        SELECT arg_min(m.request_json, d.repeat_index * 1000 + m.attempt) AS request, d.task_id
        FROM data_rollouts d JOIN model_calls m
          ON m.rollout_id = d.rollout_id AND m.call_index = 0
         AND d.repeat_index = (SELECT min(repeat_index) FROM data_rollouts x
                               WHERE x.task_id = d.task_id)
        GROUP BY d.task_id
    )
)
SELECT task_id,
       to_json(list_transform(
           list_filter(json_extract(request, '$.tools[*]'), lambda t: t->>'type' = 'function'),
           lambda t: json_object('type', 'function', 'function', json_object(
               'name', t->>'name', 'description', coalesce(t->>'description', ''),
               'parameters', coalesce(json_extract(t, '$.parameters'),
                                      '{"type": "object", "properties": {}}'::JSON)))
       ))::VARCHAR AS tools
FROM first_calls
"""
)

_CONVERSATIONS = """
CREATE OR REPLACE TEMP TABLE chat_conversations AS
WITH joined AS (
    SELECT rollout_id,
           '[' || string_agg(message, ',' ORDER BY m) || ']' AS messages,
           '[' || coalesce(string_agg(message, ',' ORDER BY m) FILTER (WHERE in_prompt), '')
               || ']' AS prompt,
           '[' || coalesce(string_agg(message, ',' ORDER BY m) FILTER (WHERE NOT in_prompt), '')
               || ']' AS completion
    FROM chat_messages GROUP BY rollout_id
)
SELECT d.*, j.messages, j.prompt, j.completion,
       CASE WHEN coalesce(t.tools, '[]') <> '[]' THEN t.tools END AS tools
FROM data_rollouts d JOIN joined j USING (rollout_id) LEFT JOIN chat_tools t USING (task_id)
WHERE j.completion <> '[]'
"""


#: From `data_rollouts` to `chat_conversations` (one row per rollout with a completion: its
#: columns, messages, prompt, completion and tools as JSON text), in order.
CHAT_STATEMENTS = (_ITEMS, _MESSAGES, _TOOLS, _CONVERSATIONS)
