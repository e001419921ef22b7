"""Incremental detokenizer: valid UTF-8 in every delta, stop strings caught across token boundaries."""
from __future__ import annotations

import pytest
from tiny_models import make_tokenizer

from llmchat.engine.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def stream(tok, text, stop=None, prompt="<|im_start|>assistant\n"):
    ids = tok(text, add_special_tokens=False).input_ids
    d = IncrementalDetokenizer(tok, tok(prompt, add_special_tokens=False).input_ids, stop)
    deltas = [d.add_token(t) for t in ids]
    if not d.stopped:
        deltas.append(d.flush())
    return ids, deltas, d


def test_multibyte_characters_never_split(tok):
    text = "日本語のテキスト, emoji 🙂🚀, café naïve русский"
    ids, deltas, _ = stream(tok, text)
    # the byte-level tokenizer really splits characters across tokens
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tok.decode(ids) == text


def test_plain_text_streams_token_by_token(tok):
    text = "The quick brown fox jumps over the lazy dog."
    ids, deltas, _ = stream(tok, text)
    assert "".join(deltas) == text
    assert sum(1 for d in deltas if d) >= len(ids) // 2   # streams, not one lump at the end


@pytest.mark.parametrize("stop", ["fox jumps", "brown f", "o", ". H"])
def test_stop_string_split_across_tokens_is_cut_and_never_shown(tok, stop):
    text = "The quick brown fox jumps over the lazy dog. Hello world!"
    ids, deltas, d = stream(tok, text, stop=[stop])
    shown = "".join(deltas)
    assert d.stopped
    assert shown == text[:text.index(stop)]
    # no delta ever leaked the beginning of the stop string past the final cut
    running = ""
    for delta in deltas:
        running += delta
        assert text.startswith(running) and len(running) <= text.index(stop)


def test_stop_string_spanning_several_tokens_really_spans_them(tok):
    text = "Once upon a time there was a little engine"
    ids = tok(text, add_special_tokens=False).input_ids
    stop = "a time the"
    pieces = [tok.decode([i]) for i in ids]
    assert stop not in pieces and not any(stop in p for p in pieces)
    _, deltas, d = stream(tok, text, stop=[stop, "zzz"])
    assert "".join(deltas) == "Once upon " and d.stopped


def test_held_back_prefix_is_released_when_no_stop_follows(tok):
    text = "Hello world! How are you today?"
    _, deltas, d = stream(tok, text, stop=["today!"])
    assert not d.stopped and "".join(deltas) == text


def test_stop_inside_multibyte_text(tok):
    text = "café 日本語のテキスト emoji 🙂🚀 end"
    _, deltas, d = stream(tok, text, stop=["🚀"])
    assert d.stopped and "".join(deltas) == "café 日本語のテキスト emoji 🙂"
    assert all("\ufffd" not in x for x in deltas)


def test_special_tokens_are_not_shown(tok):
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    d = IncrementalDetokenizer(tok, [], None)
    ids = tok("Hello world", add_special_tokens=False).input_ids
    out = "".join(d.add_token(t) for t in ids + [eos]) + d.flush()
    assert out == "Hello world"
