// LoRA's shrink and expand on AMX tiles: see lora_tiles.h for the contract.
#pragma once
