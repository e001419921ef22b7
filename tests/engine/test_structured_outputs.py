"""Constrained decoding in the real engine (tiny random model): every reply satisfies its constraint, the
mask lets through exactly what the grammar allows, neighbours without constraints are untouched, and a
constraint the library refuses is a clear ValueError that loses nothing."""
from __future__ import annotations

import json
import os
import re
import threading

import jsonschema
import pytest
import torch
from engine_helpers import random_prompt

from llmchat.engine import LLM, AsyncEngine, SamplingParams
from llmchat.engine.grammar import GrammarMasks, guessable
from llmchat.engine.speculation import RowView
from llmchat.engine.structured_outputs import StructuredOutputs

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
                         "ok": {"type": "boolean"}}}
# GBNF, as llama.cpp's `grammar` field carries it
YES_NO_GBNF = 'root ::= answer "." \nanswer ::= "yes" | "no" | "maybe"'


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir("llama"), attention_backend="torch")


def _params(constraint: StructuredOutputs | None, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=kw.pop("max_tokens", 300), structured_outputs=constraint,
                          **{"temperature": 0.0, **kw})


def _prompts(n: int) -> list[list[int]]:
    return [random_prompt(5 + 7 * i, seed=40 + i) for i in range(n)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_reply_satisfies_its_constraint(llm, temperature):
    kinds = [
        (StructuredOutputs(json=PERSON), lambda t: jsonschema.validate(json.loads(t), PERSON)),
        (StructuredOutputs(json=json.dumps(PERSON)), lambda t: jsonschema.validate(json.loads(t), PERSON)),
        (StructuredOutputs(regex=r"[0-9]{3}-[a-z]{2}"), lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2}", t) or 1 / 0),
        (StructuredOutputs(choice=["red", "green", "blue"]), lambda t: t in ("red", "green", "blue") or 1 / 0),
        (StructuredOutputs(grammar=YES_NO_GBNF), lambda t: t in ("yes.", "no.", "maybe.") or 1 / 0),
        (StructuredOutputs(grammar='start: "id=" /[a-f]{4}/'), lambda t: re.fullmatch("id=[a-f]{4}", t) or 1 / 0),
    ]
    prompts = _prompts(4)
    params = [_params(c, temperature=temperature, seed=i) for i, (c, _) in enumerate(kinds) for _ in prompts]
    outs = llm.generate(prompts * len(kinds), params)
    for i, out in enumerate(outs):
        constraint, check = kinds[i // len(prompts)]
        assert out.finish_reason == "stop", (constraint, out.text)
        check(out.text)


def test_json_object_reply_is_one_object(llm):
    # a random model may write a long one: the grammar, not the model, decides where it ends
    out = llm.generate([random_prompt(9, seed=3)], _params(StructuredOutputs(json_object=True), max_tokens=400))[0]
    if out.finish_reason == "stop":
        assert isinstance(json.loads(out.text), dict)
    else:
        assert out.finish_reason == "length" and out.text.lstrip().startswith("{")


def test_mask_allows_exactly_what_the_grammar_accepts(llm):
    """The vectorized bit unpacking against a token-by-token oracle: llguidance's own validate_tokens."""
    engine = llm.engine
    seqs = [engine.make_sequence(p, _params(c)) for p, c in zip(
        _prompts(3), [StructuredOutputs(json=PERSON), StructuredOutputs(regex="[0-9]+"), None])]
    seqs[0].matcher.consume_tokens(engine.tokenizer.encode('{"name": "a', add_special_tokens=False))
    logits = torch.randn(len(seqs), engine.vocab_size)
    batch = GrammarMasks(engine.grammar).start(seqs)
    masked = batch.apply(logits)
    assert torch.equal(masked[2], logits[2])       # the unconstrained row is the model's own
    for row, seq in enumerate(seqs[:2]):
        allowed = [t for t in range(engine.vocab_size) if seq.matcher.validate_tokens([t]) == 1]
        kept = torch.isfinite(masked[row]).nonzero().flatten().tolist()
        assert kept == allowed and kept
        assert torch.equal(masked[row, kept], logits[row, kept])


@pytest.mark.parametrize("torch_threads", [1, 2])   # masks on the library's worker pool, or on this thread
def test_guesses_past_the_grammars_end_leave_the_matcher_where_its_sequence_is(llm, torch_threads):
    """An n-gram guess often runs on past the reply's last token into the end-of-text token. The stopped matcher
    takes that token without keeping it, so rolling back every guess undid a real token: the matcher fell one
    behind its sequence (a CI run once closed a tool call as "</</tool_call>"). Guesses stop at the grammar's end,
    and after the step's masks the matcher accepts exactly what the sequence still has to write."""
    engine = llm.engine
    seq = engine.make_sequence(_prompts(1)[0], _params(StructuredOutputs(grammar=YES_NO_GBNF)))
    reply = engine.tokenizer.encode("maybe.", add_special_tokens=False)
    end = engine.tokenizer.eos_token_id
    seq.matcher.consume_tokens(reply[:1])
    rest = reply[1:]
    draft = guessable(seq.matcher, rest + [end, end])
    assert draft == rest
    assert seq.matcher.validate_tokens(rest) == len(rest) and not seq.matcher.is_stopped()
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(torch_threads)
        batch = GrammarMasks(engine.grammar).start([RowView(seq, draft, ahead) for ahead in range(len(draft) + 1)])
        batch.apply(torch.randn(len(draft) + 1, engine.vocab_size))
    finally:
        torch.set_num_threads(old)
    assert seq.matcher.validate_tokens(rest) == len(rest), "the masks' rollback moved the matcher"
    seq.matcher.consume_tokens(rest)
    assert seq.matcher.is_stopped()


def test_unconstrained_neighbours_are_untouched_and_constrained_replies_do_not_depend_on_them(llm):
    prompts = _prompts(6)
    schema, regex = StructuredOutputs(json=PERSON), StructuredOutputs(regex=r"[a-z]{2,12}")
    mixed = [_params(schema), _params(None, max_tokens=12), _params(regex, temperature=0.8, seed=5),
             _params(None, max_tokens=9, temperature=1.0, seed=2), _params(schema, temperature=1.0, seed=7),
             _params(None, max_tokens=20)]
    together = llm.generate(prompts, mixed)
    alone = [llm.generate([p], sp)[0] for p, sp in zip(prompts, mixed)]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert [o.token_ids for o in together] == [o.token_ids for o in llm.generate(prompts, mixed)]


@pytest.mark.parametrize("constraint,parameter,message", [
    (StructuredOutputs(regex="[a-", parameter="structured_outputs.regex"), "structured_outputs.regex",
     "unclosed character class"),
    (StructuredOutputs(json={"type": "no-such-type"}, parameter="response_format"), "response_format", "type"),
    (StructuredOutputs(json="{not json"), "structured_outputs", "not valid JSON"),
    (StructuredOutputs(grammar="root ::= missing"), "structured_outputs", "missing"),
    (StructuredOutputs(choice=[]), "structured_outputs", "non-empty"),
    (StructuredOutputs(regex="a", choice=["a"]), "structured_outputs", "exactly one"),
])
def test_a_refused_constraint_is_a_clear_error_and_the_engine_goes_on(llm, constraint, parameter, message):
    with pytest.raises(ValueError, match="(?s)" + re.escape(parameter) + ".*" + re.escape(message)) as caught:
        llm.generate(["hello"], _params(constraint))
    assert "Traceback" not in str(caught.value)
    out = llm.generate(["hello"], _params(StructuredOutputs(choice=["fine"])))[0]
    assert out.text == "fine"


def _grammar_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("llmchat-grammar") and t.is_alive()]


async def test_shutdown_ends_the_grammar_worker(tiny_model_dir):
    """With a core to spare, a step's masks are filled on a worker thread beside the forward pass; an engine
    shut down (the app unloading a model) ends it, so no thread outlives its engine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    try:
        before = set(_grammar_workers())
        engine = AsyncEngine(tiny_model_dir("llama"), attention_backend="torch")
        deltas = [d async for d in engine.generate(_prompts(1)[0], _params(StructuredOutputs(choice=["yes", "no"])))]
        assert "".join(d.text for d in deltas) in ("yes", "no")
        assert set(_grammar_workers()) - before            # the worker ran
        await engine.shutdown()
        assert not set(_grammar_workers()) - before        # and ended with its engine
    finally:
        torch.set_num_threads(threads)
