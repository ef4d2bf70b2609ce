"""Schemathesis hooks for `journal serve` (loaded by clients/schemathesis.sh).

JSON Lines (`application/x-ndjson`, `application/jsonl`): the server's document describes such a body by the
sequence of its lines (an array whose items are the lines' JSON values), as appends take it
and reads answer it. These hooks write a generated array as JSON Lines, and read an answer's
lines back into an array, so that Schemathesis sends appends in that form and checks every
line of an answer against the document's schema.
"""

import json

import schemathesis

NDJSON = "application/x-ndjson"
JSONL = "application/jsonl"


@schemathesis.serializer(NDJSON, JSONL)
def write_lines(ctx, value):
    """A generated value as JSON Lines: each item of an array one line, anything else one line."""
    items = value if isinstance(value, list) else [value]
    return "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items).encode("utf-8")


@schemathesis.deserializer(NDJSON, JSONL)
def read_lines(ctx, response):
    """An answer's JSON Lines as an array of their values (blank lines skipped)."""
    text = response.content.decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
