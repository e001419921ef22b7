"""The base of every request body model: unknown fields accepted and ignored (as OpenAI servers do), no NaN."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    # unknown fields (newer OpenAI options, client metadata) are accepted and ignored, as OpenAI servers do
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
