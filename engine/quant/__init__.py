"""Quantized weights: GGUF tensors repacked losslessly into the kernels' block layout, GGUF files read as
models, and quantization of 16/32-bit models at load."""
