"""Request bodies of the OpenAI API as pydantic models (they are the OpenAPI schema), and their mapping
onto the engine's SamplingParams and prompts.

The schema says what the server accepts: ranges and shapes are declared here, so a request the schema allows is
served, and one it refuses is a 400 before it reaches the engine. Fields OpenAI defines that the engine does not
serve are accepted and ignored (user, store, metadata) or declared with the only value served (n, best_of).
Extensions from vLLM and llama-server: top_k, min_p, repetition_penalty, ignore_eos, continue_final_message,
add_generation_prompt, chat_template_kwargs, structured_outputs, grammar and json_schema.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from ..chat import Continuation, TemplatedChat
from ..sampling_params import SamplingParams
from ..structured_outputs import StructuredOutputs
from .body import Body, FalseOnly, Int, IntIn
from .constraints import ResponseFormat, StructuredOutputsSpec, requested_constraint
from .errors import ApiError
from .messages import ChatMessage, has_tool_turns, template_message
from .tools import Tool, ToolChoice, ToolPlan, plan_tools, renders_tools, written_out

INT32_MAX = 2**31 - 1
# names the renderer binds itself (the messages, the request's own fields, apply_chat_template's parameters): a
# template keyword argument may not take them
RESERVED_TEMPLATE_KWARGS = ("messages", "conversation", "tools", "documents", "add_generation_prompt",
                            "continue_final_message", "chat_template", "tokenize", "return_dict", "padding",
                            "truncation", "max_length", "return_tensors", "return_assistant_tokens_mask",
                            "tokenizer_kwargs")
TemplateKwargs = Annotated[dict[str, Any], Field(json_schema_extra={
    "propertyNames": {"not": {"enum": list(RESERVED_TEMPLATE_KWARGS)}}})]


class StreamOptions(Body):
    include_usage: bool | None = False


class _Sampling(Body):
    model: str | None = Field(None, description="a model id from GET /v1/models; default: the first model")
    max_tokens: IntIn(1, INT32_MAX) | None = Field(None)
    temperature: float | None = Field(None, ge=0, le=2, description="0 = greedy; default: the model's")
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: IntIn(-1, INT32_MAX) | None = Field(None, description="0 or -1 = off")
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0, le=10, description="1 = off (transformers' semantics)")
    seed: Int | None = Field(None, description="any integer (taken modulo 2**64)")
    stop: Annotated[str, Field(min_length=1)] | list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, max_length=16)
    n: IntIn(1, 1) | None = Field(1, description="one choice per request")
    stream: bool | None = False
    stream_options: StreamOptions | None = Field(None, description="read when stream is true")
    ignore_eos: bool | None = False
    user: str | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsSpec | None = Field(None, description="vLLM's: one of json, regex, "
                                                             "choice, grammar, json_object")
    grammar: str | None = Field(None, description="llama-server's: a GBNF (or Lark) grammar the reply follows")
    json_schema: dict | None = Field(None, description="llama-server's: a JSON schema the reply follows")

    def constraint(self) -> StructuredOutputs | None:
        return requested_constraint(self.response_format, self.structured_outputs, self.grammar, self.json_schema)

    def sampling_params(self, max_tokens: int | None, logprobs: int | None,
                        constraint: StructuredOutputs | None) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        params = SamplingParams(
            max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
            seed=None if self.seed is None else self.seed % 2**64, stop=stop, ignore_eos=bool(self.ignore_eos),
            structured_outputs=constraint)
        if logprobs is not None:
            params.logprobs = logprobs
        return params

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


@dataclass
class ChatPlan:
    """What the engine runs for a chat request, and how its reply is read back."""
    prompt: object                     # messages, a Continuation or a TemplatedChat of them
    params: SamplingParams
    tools: ToolPlan | None


class ChatCompletionRequest(_Sampling):
    # as OpenAI rules: tool_choice only beside tools
    model_config = ConfigDict(json_schema_extra={"dependentRequired": {"tool_choice": ["tools"]}})

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: IntIn(1, INT32_MAX) | None = Field(None)
    logprobs: bool | None = False
    top_logprobs: IntIn(0, 20) | None = Field(None, description="read when logprobs is true")
    tools: list[Tool] | None = Field(None, min_length=1)
    tool_choice: ToolChoice | None = Field(None, description="default: auto with tools, none without")
    parallel_tool_calls: bool | None = True
    continue_final_message: bool | None = Field(
        False, description="vLLM's extension: go on with the last message instead of a new reply")
    add_generation_prompt: bool | None = Field(True, description="false: the prompt ends with the last message")
    chat_template_kwargs: TemplateKwargs | None = Field(
        None, description="vLLM's and llama-server's extension: keyword arguments the chat template reads, such as "
                          "enable_thinking")

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self):
        if "tool_choice" in self.model_fields_set and "tools" not in self.model_fields_set:
            # an ApiError passes through pydantic as it is: a 400 naming the parameter
            raise ApiError(400, "tool_choice is only allowed when tools are given", param="tool_choice")
        return self

    @model_validator(mode="after")
    def _template_kwargs_not_reserved(self):
        taken = [k for k in (self.chat_template_kwargs or {}) if k in RESERVED_TEMPLATE_KWARGS]
        if taken:
            raise ApiError(400, f"chat_template_kwargs cannot set {taken[0]!r}: the request's messages, tools, "
                                f"add_generation_prompt and continue_final_message say that",
                           param="chat_template_kwargs")
        return self

    def to_engine(self, chat_template) -> ChatPlan:
        """`chat_template`: the model's (it decides the tool format)."""
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        tools = plan_tools(self.tools, self.tool_choice, self.parallel_tool_calls, chat_template)
        constraint = self.constraint()
        if tools is not None and tools.constraint is not None:
            if constraint is not None:
                raise ApiError(400, f"tool_choice {self._choice_name()} already constrains the reply to a tool "
                                    f"call: drop {constraint.parameter.split('.')[0]}", param="tool_choice")
            constraint = tools.constraint
        messages = [template_message(m) for m in self.messages]
        params = self.sampling_params(max_tokens, logprobs, constraint)
        kwargs: dict = dict(self.chat_template_kwargs or {})
        if tools is not None and tools.in_template:
            kwargs["tools"] = tools.tools
        elif tools is not None or (not renders_tools(chat_template) and has_tool_turns(messages)):
            messages = written_out(messages, tools.tools if tools is not None else None)
        prompt: object = messages
        if self.continue_final_message:
            if messages[-1]["role"] == "assistant":
                prompt = Continuation(messages[:-1], messages[-1]["content"])
            else:   # go on with a user's (or system's) text: the template's own continue_final_message
                kwargs.update(continue_final_message=True, add_generation_prompt=False)
        elif self.add_generation_prompt is False:
            kwargs["add_generation_prompt"] = False
        if kwargs:
            prompt = TemplatedChat(prompt, template_kwargs=kwargs)
        return ChatPlan(prompt, params, tools)

    def _choice_name(self) -> str:
        choice = self.tool_choice
        return repr(choice) if isinstance(choice, str) else repr(choice.function.name)


TokenIds = list[IntIn(0, INT32_MAX)]

# a batch of prompts holds one: one choice per request
OneText = Annotated[list[str], Field(min_length=1, max_length=1)]
OneIdList = Annotated[list[TokenIds], Field(min_length=1, max_length=1)]


class CompletionRequest(_Sampling):
    prompt: str | TokenIds | OneText | OneIdList = Field(
        "", description="text or token ids, one prompt (a list holds at most one); empty: the start of a document")
    max_tokens: IntIn(1, INT32_MAX) | None = Field(16)
    logprobs: IntIn(0, 20) | None = Field(None)
    echo: FalseOnly | None = Field(False, description="not served: false only")
    suffix: Literal[""] | None = Field(None, description="not served (no insertion)")
    best_of: IntIn(1, 1) | None = Field(None, description="one choice per request")

    def to_engine(self, tokenizer) -> tuple[str | list[int], SamplingParams]:
        prompt = _one_prompt(self.prompt, tokenizer)
        return prompt, self.sampling_params(self.max_tokens, self.logprobs, self.constraint())


def _one_prompt(prompt, tokenizer) -> str | list[int]:
    """One prompt, as text or ids. An empty (or blank) one starts a document, as OpenAI's API defines it: the
    model's BOS token (its end-of-text token when it has none) before whatever blank text there is."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, "give one prompt per request", param="prompt", code="unsupported_value")
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt.strip():
        return prompt
    if isinstance(prompt, list) and prompt:
        return prompt
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    text = list(tokenizer(prompt, add_special_tokens=False).input_ids) if prompt else []
    return ([start] if start is not None else []) + text
