// GGUF block tensors straight into a tile layout (x86's quant_tiles.h or ARM's quant_tiles_neon.h), or into the
// row layout (quant_linear.h), in one pass over the file's bytes on the worker pool: what
// engine/quant/gguf_blocks.py's repack (followed by QuantWeight.tiled_copy() for the tiles) makes, without its
// per-weight temporaries, and for the tiles without the fp32 factors they never read. The Python path stays
// the oracle. A load then holds the bytes the kernels read: the file's, on the tiles.
//
// Each 16-row group is decoded into one integer a weight (Q4: 0..15, Q5: 0..31, Q6: w + 32, Q8: the int8
// bits) and the file's factors, then written in the layout's order:
//   values  x86: nibble bytes [b][r 4][n 16][j 4] (Q8: int8 ^ 0x80, [b][r 8][n][j 4]); ARM: [b][p 8][c][h 2][j 8]
//           (row 2p + h, bytes 8c + j of its block, no bias)
//   high    x86: int64 words [b][plane][r 8], bit 4n + j = the plane's bit of element 4r + j of row n;
//           ARM Q5: [b][q 4][h 2][j 8] bytes, bit 4 odd + c = bit 4 of element 8c + j of row 2(2q + odd) + h;
//           ARM Q6: [b][p 8][h 2][j 8] bytes, bit 2c + plane of element 8c + j of row 2p + h
//   factors fp16 scales (and mins) [b][16] for Q8_0, Q4_0/1, Q5_0/1; K-quants compact (tile_factors.h):
//           Q4_K/Q5_K sc and m as u6 [s][6][16] then fp16 d (and -dmin) [s][16]; Q6_K i8 sc [16 s][16], d [s][16]
// The row layout keeps each row's own order: nibble bytes (or int8), high-bit words per block (and plane),
// fp16 factors as the file's, K-quants' as fp32 products per sub-block (d sc, -(dmin m); exact).
#pragma once
#include <cstdint>

#include "kernels.h"

namespace llmchat {

enum class GgufType : int { Q8_0 = 0, Q4_0 = 1, Q4_1 = 2, Q5_0 = 3, Q5_1 = 4, Q4_K = 5, Q5_K = 6, Q6_K = 7 };

enum class GgufLayout : int { Rows = 0, X86Tiles = 1, ArmTiles = 2 };

struct GgufTileArgs {
  GgufType type = GgufType::Q8_0;
  const uint8_t* raw = nullptr;     // the tensor's blocks, rows * (cols / block elements) of them
  const int64_t* order = nullptr;   // optional: output row n is the file's row order[n]
  int64_t rows = 0, cols = 0;       // cols a multiple of the block; for the tiles rows % 16 == 0
  GgufLayout layout = GgufLayout::X86Tiles;
  bool q6_wide = false;             // Q6_K as int8 values (Q8Halves), else in 6 bits (Q6)
  uint8_t* values = nullptr;
  uint8_t* high = nullptr;          // Q5_0/1, Q5_K, Q6_K in 6 bits
  uint8_t* scales = nullptr;        // (fp32 in the row layout for K-quants)
  uint8_t* mins = nullptr;          // Q4_1, Q5_1, Q4_K, Q5_K
};

// Bytes of one file row of `cols` elements (0 for a type the file cannot hold in rows of cols).
int64_t gguf_row_bytes(GgufType type, int64_t cols);

void gguf_to_tiles(const GgufTileArgs& a, const Runtime& rt);

}  // namespace llmchat
