"""ARM speed on paper: llvm-mca cycle estimates of the kernels' hot inner loops (and llama.cpp's, from a tree
the user points to) on Neoverse V1/N2, Cortex-A76 and Apple M1/M2, and tokens/s projected from them.
Run `python -m tools.estimate --help` from the root of a checkout (it compiles the sources in kernels/csrc; a
developer tool, outside the llmchat package and its wheel); the method and its limits are in docs/performance.md."""
