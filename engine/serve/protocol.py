"""Request bodies of the OpenAI API as pydantic models (they are the OpenAPI schema), and their mapping
onto the engine's SamplingParams and prompts.

Ranges are declared here, so every out-of-range value is a 400 before it reaches the engine. Fields
OpenAI defines that the engine does not serve are either accepted and ignored (user, store, metadata)
or refused with a 400 (n > 1, tools, echo...). Extensions from vLLM and llama-server: top_k, min_p,
repetition_penalty, ignore_eos, and continue_final_message (go on with the last assistant message).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..chat import Continuation
from ..sampling_params import SamplingParams
from .errors import ApiError

INT32_MAX = 2**31 - 1


class _Body(BaseModel):
    # unknown fields (newer OpenAI options, client metadata) are accepted and ignored, as OpenAI servers do
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool | None = False


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class _Sampling(_Body):
    model: str | None = Field(None, description="a model id from GET /v1/models; default: the first model")
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0, le=2, description="0 = greedy; default: the model's")
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX, description="0 or -1 = off")
    min_p: float | None = Field(None, ge=0, le=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0, le=10, description="1 = off (transformers' semantics)")
    seed: int | None = Field(None, ge=-2**63, le=2**64 - 1)
    stop: str | list[str] | None = Field(None, max_length=16)
    n: int | None = Field(1, ge=1, le=128, description="only 1 is served")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool | None = False
    user: str | None = None

    def check_common(self) -> None:
        if self.n not in (None, 1):
            raise ApiError(400, "n must be 1 (one choice per request)", param="n", code="unsupported_value")
        if self.stream_options is not None and not self.stream:
            raise ApiError(400, "stream_options is only allowed when stream is true", param="stream_options")

    def sampling_params(self, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        params = SamplingParams(
            max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
            seed=None if self.seed is None else self.seed % 2**64, stop=stop, ignore_eos=bool(self.ignore_eos))
        if logprobs is not None:
            params.logprobs = logprobs
        return params

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict] | None = None
    response_format: dict | None = None
    continue_final_message: bool | None = Field(
        False, description="vLLM's extension: go on with the last (assistant) message instead of a new reply")
    add_generation_prompt: bool | None = Field(True, description="false together with continue_final_message")

    def check(self) -> None:
        self.check_common()
        if self.tools:
            raise ApiError(400, "tools (function calling) are not supported by this server", param="tools",
                           code="unsupported_value")
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise ApiError(400, "only the text response_format is supported", param="response_format",
                           code="unsupported_value")
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        if self.add_generation_prompt is False and not self.continue_final_message:
            raise ApiError(400, "add_generation_prompt: false is only supported with continue_final_message",
                           param="add_generation_prompt", code="unsupported_value")

    def to_engine(self) -> tuple[list[dict] | Continuation, SamplingParams]:
        self.check()
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        messages = [_message(i, m) for i, m in enumerate(self.messages)]
        params = self.sampling_params(max_tokens, logprobs)
        if self.continue_final_message:
            if messages[-1]["role"] != "assistant" or self.add_generation_prompt:
                raise ApiError(400, "continue_final_message needs the last message to be the assistant's and "
                               "add_generation_prompt false", param="continue_final_message")
            return Continuation(messages[:-1], messages[-1]["content"]), params
        return messages, params


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]] = Field(..., description="text or token ids; one prompt")
    max_tokens: int | None = Field(16, ge=1, le=INT32_MAX)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=128)

    def to_engine(self) -> tuple[str | list[int], SamplingParams]:
        self.check_common()
        if self.echo:
            raise ApiError(400, "echo is not supported", param="echo", code="unsupported_value")
        if self.suffix:
            raise ApiError(400, "suffix (insertion) is not supported", param="suffix", code="unsupported_value")
        if self.best_of not in (None, 1):
            raise ApiError(400, "best_of must be 1", param="best_of", code="unsupported_value")
        return _one_prompt(self.prompt), self.sampling_params(self.max_tokens, self.logprobs)


def _message(index: int, m: ChatMessage) -> dict:
    """A chat message as the chat template takes it: role and text content."""
    if isinstance(m.content, list):
        if any(part.type != "text" for part in m.content):
            raise ApiError(400, f"message {index}: only text content parts are supported",
                           param=f"messages.{index}.content", code="unsupported_value")
        content = "".join(part.text or "" for part in m.content)
    else:
        content = m.content or ""
    role = "system" if m.role == "developer" else m.role
    return {"role": role, "content": content}


def _one_prompt(prompt) -> str | list[int]:
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, "give one prompt per request", param="prompt", code="unsupported_value")
        prompt = prompt[0]
    if not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    return prompt
