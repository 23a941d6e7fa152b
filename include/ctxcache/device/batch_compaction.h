// Batch compaction: finished sequences leave the active batch and the survivors close ranks, in place.
//
// A compaction map oldToNew has one entry per old row: -1 (the row retires) or its new row. A valid map is
// dense (the survivors fill [0, newBatch), each destination exactly once) and order-preserving (survivors keep
// their relative order), so survivor k goes to row k and rows only move to lower indices: that is what makes
// the in-place move safe. Anything else is a ContractError naming the first offending row; nothing moves.
//
// Cost: planning O(oldBatch) on the host; the move itself is one launch over every tensor given.
// Threading: the backend's single-writer contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"

namespace ctxcache::device {

// Validates the map and fills `moves` with the rows that actually move (identity survivors are dropped).
void planCompaction(char const* op, int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch,
                    std::vector<RowMove>& moves);

// Compacts rows [0, oldBatch) of a dim-0 batched device tensor of `rows` rows of rowBytes bytes (any element
// size: rowBytes = elements per row * element size).
void compactBatch(DeviceBackend& backend, void* base, size_t rowBytes, int32_t rows, int32_t const* oldToNew,
                  int32_t oldBatch, int32_t newBatch);

// Rebases absolute execution-row indices (row = sequence * rowsPerSequence + k) of a device int32 array in place
// after the compaction described by the map (validated as above): a row of a surviving sequence gets its new
// index, a row of a retired sequence and any out-of-range value become -1.
void rebaseExecutionRowIndices(DeviceBackend& backend, int32_t* indices, int64_t count, int32_t const* oldToNew,
                               int32_t oldBatch, int32_t newBatch, int32_t rowsPerSequence);

}  // namespace ctxcache::device
