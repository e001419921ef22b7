"""Prompt-set parsing: JSONL and plain text, with line-numbered errors for bad lines."""
import json

import pytest

from llmchat.engine.compare.prompts import load_prompts


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_plain_text_one_prompt_per_line_skips_blanks(tmp_path):
    path = write(tmp_path, "p.txt", ["Hello there", "", "  What is 2+2?  ", "{not json, just text}"])
    items, errors = load_prompts(path)
    assert errors == []
    assert [(i.index, i.line, i.prompt) for i in items] == [
        (0, 1, "Hello there"), (1, 3, "What is 2+2?"), (2, 4, "{not json, just text}")]
    assert items[0].engine_input() == [{"role": "user", "content": "Hello there"}]
    assert items[0].engine_input(raw=True) == "Hello there"


def test_jsonl_fields(tmp_path):
    path = write(tmp_path, "p.jsonl", [
        json.dumps({"prompt": "Capital of France?", "system": "Be brief.", "expected": "Paris", "id": "q1"}),
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                 {"role": "user", "content": "again"}], "expected": ["a", "b"]}),
    ])
    items, errors = load_prompts(path)
    assert errors == []
    first, second = items
    assert first.engine_input() == [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Capital of France?"}]
    assert first.expected == "Paris" and first.id == "q1"
    assert second.expected == ("a", "b") and second.display == "again"
    assert second.to_json()["expected"] == ["a", "b"]


def test_malformed_lines_are_reported_with_line_numbers_and_the_rest_loads(tmp_path):
    path = write(tmp_path, "p.jsonl", [
        json.dumps({"prompt": "good one"}),
        '{"prompt": "unterminated',
        "",
        json.dumps(["a", "list"]),
        json.dumps({"promt": "typo"}),
        json.dumps({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}),
        json.dumps({"messages": [{"role": "robot", "content": "y"}]}),
        json.dumps({"prompt": "   "}),
        json.dumps({"prompt": "ok", "expected": 42}),
        json.dumps({"prompt": "good two"}),
    ])
    items, errors = load_prompts(path)
    assert [i.prompt for i in items] == ["good one", "good two"]
    assert [i.line for i in items] == [1, 10]
    assert [i.index for i in items] == [0, 1]
    by_line = {e.line: e.message for e in errors}
    assert sorted(by_line) == [2, 4, 5, 6, 7, 8, 9]
    assert by_line[2].startswith("invalid JSON")
    assert "expected a JSON object" in by_line[4]
    assert "keys found: promt" in by_line[5]
    assert "exactly one of 'prompt' or 'messages'" in by_line[6]
    assert "role 'robot'" in by_line[7]
    assert "non-empty string" in by_line[8]
    assert "'expected'" in by_line[9]
    assert str(errors[0]).startswith("line 2: ")


def test_missing_file_and_binary_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="prompt file not found"):
        load_prompts(tmp_path / "nope.jsonl")
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_prompts(bad)


def test_input_hash_follows_content_not_position(tmp_path):
    a, _ = load_prompts(write(tmp_path, "a.txt", ["same", "other"]))
    b, _ = load_prompts(write(tmp_path, "b.txt", ["same", "changed"]))
    assert a[0].input_hash() == b[0].input_hash()
    assert a[1].input_hash() != b[1].input_hash()
    assert a[0].input_hash(raw=True) != a[0].input_hash(raw=False)


def test_json_errors_read_as_one_sentence(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "unterminated}\n{"prompt": }\n')
    _, errors = load_prompts(path)
    assert [e.message for e in errors] == ["invalid JSON: Unterminated string starting at column 12",
                                           "invalid JSON: Expecting value at column 12"]
