"""What an output shows beside its verdict, as SQL expressions over its text (and its task's
prompt): a loop, an echo of the prompt, a placeholder copied from it, a chat turn marker.

Each is a test with a stated error rate rather than a count tuned on one run:
- a loop: the output's last LOOP_WORDS words occur LOOP_REPEATS or more times in it, or one
  line makes up at least half of its lines and occurs LOOP_LINES or more times (`'<number>\\n'`
  sixteen times is a loop of one word a line). An output that repeats nothing is never flagged;
  on the reference answers of the benchmarks gymflow ships, none is (bench/signs.py measures it);
- an echo: at least ECHO_SHARE of the output is text copied from the prompt: its lines of
  ECHO_LINE_CHARS or more, or its placeholders. An answer quotes a few words of its question; an
  output mostly made of the prompt is the prompt continued, not a turn answered;
- a placeholder: the output holds a `<word>` the prompt holds (`Answer: <city>`): the prompt's
  description of the answer's form was copied instead of filled in;
- a turn marker: the output holds a chat template's role marker (`<start_of_turn>`,
  `<|im_start|>`, `### Instruction:`): the model writes the conversation's next turns itself,
  the sign of a checkpoint served without the template it was trained on;
- a loop of calls: the trajectory's last LOOP_REPEATS tool calls are one call (the same tool
  with the same arguments). An agent stopped at its turn or step limit while doing this was
  stuck, not on its way: a longer limit only buys more of the same."""

from __future__ import annotations

#: A loop by words: the last LOOP_WORDS words occur at least LOOP_REPEATS times.
LOOP_WORDS, LOOP_REPEATS = 8, 3
#: A loop by lines: one line occurs at least LOOP_LINES times and makes up half the lines.
LOOP_LINES = 4
#: An echo: at least this share of the output's characters is copied from the prompt...
ECHO_SHARE = 0.5
#: ...counting the prompt's lines of at least this many characters (shorter ones are words an
#: answer may well repeat) and its placeholders.
ECHO_LINE_CHARS = 16
#: A placeholder: `<` a word or a few `>`, as prompts describe an answer's form.
PLACEHOLDER = r"<[A-Za-z][A-Za-z0-9 _-]{0,30}>"
#: Role markers of the chat templates in use (ChatML, Gemma, Llama 2/3, Alpaca, Vicuna, Zephyr).
TURN_MARKER = (
    r"<\|im_start\|>|<\|im_end\|>|<start_of_turn>|<end_of_turn>|\[/?INST\]|<\|user\|>"
    r"|<\|assistant\|>|<\|start_header_id\|>|<\|eot_id\|>|(^|\n)### ?(Instruction|Response|Input):"
    r"|(^|\n)(USER|ASSISTANT|Human|Assistant): "
)


def calls_loop_sql(trajectory: str) -> str:
    """SQL: the trajectory's (Responses API items as JSON) last LOOP_REPEATS function calls are
    the same tool with the same arguments."""
    items = f"json_extract(coalesce({trajectory}, '[]'), '$[*]')"
    calls = (
        f"list_transform(list_filter({items}, "
        "lambda i: json_extract_string(i, '$.type') = 'function_call'), "
        "lambda i: concat(json_extract_string(i, '$.name'), chr(0), "
        "coalesce(json_extract_string(i, '$.arguments'), '')))"
    )
    tail = f"list_slice({calls}, -{LOOP_REPEATS}, -1)"
    return f"coalesce(len({tail}) = {LOOP_REPEATS} AND len(list_distinct({tail})) = 1, FALSE)"


# The tests below read an output's pieces (its squeezed text, words, lines; its prompt's long
# lines and placeholders) as columns that `columns_sql` computes once a row. Written inline, each
# test recomputed them, inside every lambda call and in every WHERE: 8 times the work.
SQUEEZED, LOWER, WORDS, LINES = "sign_squeezed", "sign_lower", "sign_words", "sign_lines"
RAW_LOWER, HOLDERS, PIECES = "sign_raw_lower", "sign_holders", "sign_pieces"


def squeezed_sql(text: str) -> str:
    """SQL: `text` trimmed, each run of white space one space."""
    return f"regexp_replace(trim(coalesce({text}, '')), '\\s+', ' ', 'g')"


def _placeholders(prompt: str) -> str:
    found = f"regexp_extract_all(lower(coalesce({prompt}, '')), '{PLACEHOLDER.lower()}')"
    return f"list_distinct({found})"


def columns_sql(text: str, prompt: str | None = None) -> str:
    """SQL select-list items: the pieces of the output `text` (and of its task's prompt
    `prompt`, for the echo and placeholder tests) that the tests below read, named as this
    module's constants. An output of fewer than LOOP_LINES lines gets no list of lines: it
    cannot loop by lines, and splitting it is most of the cost."""
    squeezed = squeezed_sql(text)
    newlines = f"length(coalesce({text}, '')) - length(replace(coalesce({text}, ''), chr(10), ''))"
    lines = (
        f"list_filter(list_transform(string_split({text}, chr(10)), lambda l: trim(l)), "
        "lambda l: l <> '')"
    )
    items = [
        f"{squeezed} AS {SQUEEZED}",
        f"string_split({squeezed}, ' ') AS {WORDS}",
        f"CASE WHEN {newlines} >= {LOOP_LINES - 1} THEN {lines} END AS {LINES}",
    ]
    if prompt is not None:
        long_lines = (
            f"list_filter(list_transform(string_split(coalesce({prompt}, ''), chr(10)), "
            f"lambda l: lower({squeezed_sql('l')})), lambda l: length(l) >= {ECHO_LINE_CHARS})"
        )
        items += [
            f"lower({squeezed}) AS {LOWER}",
            f"lower(coalesce({text}, '')) AS {RAW_LOWER}",
            f"{_placeholders(prompt)} AS {HOLDERS}",
            f"list_concat({long_lines}, {_placeholders(prompt)}) AS {PIECES}",
        ]
    return ", ".join(items)


def loop_sql() -> str:
    """SQL over `columns_sql`'s columns: the output runs in a loop (by words or by lines, as
    the module says)."""
    tail = f"array_to_string(list_slice({WORDS}, -{LOOP_WORDS}, -1), ' ')"
    by_words = (
        f"(len({WORDS}) >= {LOOP_WORDS * LOOP_REPEATS} AND length({tail}) > 0 AND "
        f"(length({SQUEEZED}) - length(replace({SQUEEZED}, {tail}, ''))) "
        f">= {LOOP_REPEATS} * length({tail}))"
    )
    top = f"list_aggregate({LINES}, 'mode')"
    repeated = f"len(list_filter({LINES}, lambda l: l = {top}))"
    by_lines = f"({repeated} >= {LOOP_LINES} AND 2 * {repeated} >= len({LINES}))"
    return f"coalesce({by_words}, FALSE) OR coalesce({by_lines}, FALSE)"


def placeholder_sql() -> str:
    """SQL over `columns_sql`'s columns (with a prompt): the output holds a placeholder of the
    prompt."""
    return f"coalesce(len(list_filter({HOLDERS}, lambda p: contains({RAW_LOWER}, p))) > 0, FALSE)"


def echo_sql() -> str:
    """SQL over `columns_sql`'s columns (with a prompt): at least ECHO_SHARE of the output is
    copied from the prompt (its long lines and its placeholders, each occurrence counted)."""
    copied = (
        f"list_sum(list_transform({PIECES}, "
        f"lambda p: length({LOWER}) - length(replace({LOWER}, p, ''))))"
    )
    enough = f"coalesce({copied}, 0) >= {ECHO_SHARE} * length({LOWER})"
    return f"coalesce(length({LOWER}) > 0 AND {enough}, FALSE)"


def turn_marker_sql(text: str) -> str:
    """SQL: the output `text` holds a chat template's role marker."""
    escaped = TURN_MARKER.replace("'", "''")
    return f"coalesce(regexp_matches({text}, '{escaped}'), FALSE)"
