"""Model definitions. Every supported architecture maps to one module class (see args.FAMILIES)."""
from .args import FAMILIES, ModelArgs, architecture_of
from .llama import CausalLM
from .weight_names import STACKED_PARAMS, parameter_target

SUPPORTED_ARCHITECTURES = tuple(FAMILIES)
MODEL_CLASSES = {arch: CausalLM for arch in FAMILIES}

__all__ = ["CausalLM", "ModelArgs", "MODEL_CLASSES", "STACKED_PARAMS", "SUPPORTED_ARCHITECTURES",
           "architecture_of", "parameter_target"]
