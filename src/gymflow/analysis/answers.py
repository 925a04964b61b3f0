"""Extracted answers, as verifiers report them in `details.extracted`, compared after
normalisation: case, whitespace, thousands separators, currency signs and a trailing period do not
make two answers different."""

from __future__ import annotations


def extracted_sql(details_column: str) -> str:
    """SQL for the extracted answer a verification's details hold (NULL when none)."""
    return f"json_extract_string({details_column}, '$.extracted')"


def normalised_sql(expression: str) -> str:
    """SQL normalising an answer string: lower case, no whitespace, commas, '$' or final '.'."""
    squeezed = f"regexp_replace(trim({expression}), '[\\s,$]+', '', 'g')"
    return f"regexp_replace(lower({squeezed}), '\\.$', '')"
