// LoRA's shrink and expand on BFMMLA tiles (ARM with bf16): see lora_tiles.h for the contract.
#pragma once
