// Batch compaction: map validation and the two generic device entry points.
#include "ctxcache/device/batch_compaction.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

void planCompaction(char const* op, int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch,
                    std::vector<RowMove>& moves) {
    auto fail = [op](std::string const& why) { throw ContractError(std::string(op) + ": " + why); };
    if (oldBatch < 0 || newBatch < 0) fail("negative batch size");
    if (newBatch > oldBatch)
        fail("newBatch " + std::to_string(newBatch) + " exceeds oldBatch " + std::to_string(oldBatch));
    if (oldBatch > 0 && !oldToNew) fail("oldToNew is null");
    moves.clear();
    int32_t next = 0;  // the destination the next survivor must take
    int32_t lastFrom = -1;
    for (int32_t i = 0; i < oldBatch; ++i) {
        int32_t const to = oldToNew[i];
        if (to == -1) continue;
        if (to < -1 || to >= newBatch)
            fail("oldToNew[" + std::to_string(i) + "] = " + std::to_string(to) + " is outside [-1, " +
                 std::to_string(newBatch) + ")");
        if (to < next)
            fail("overlapping map: oldToNew[" + std::to_string(i) + "] = " + std::to_string(to) +
                 " repeats or precedes the destination of row " + std::to_string(lastFrom));
        if (to > next)
            fail("oldToNew[" + std::to_string(i) + "] = " + std::to_string(to) + " reorders or leaves a gap: " +
                 "survivors must keep their order and fill [0, newBatch) (expected " + std::to_string(next) + ")");
        if (to != i) moves.push_back(RowMove{i, to});
        lastFrom = i;
        ++next;
    }
    if (next != newBatch) fail(std::to_string(next) + " rows survive but newBatch is " + std::to_string(newBatch));
}

void compactBatch(DeviceBackend& backend, void* base, size_t rowBytes, int32_t rows, int32_t const* oldToNew,
                  int32_t oldBatch, int32_t newBatch) {
    char const* op = "compactBatch";
    if (rows < 0 || oldBatch > rows)
        throw ContractError(std::string(op) + ": oldBatch " + std::to_string(oldBatch) + " exceeds the tensor's " +
                            std::to_string(rows) + " rows");
    if (rowBytes == 0 || (!base && rows > 0)) throw ContractError(std::string(op) + ": null tensor or empty rows");
    std::vector<RowMove> moves;
    planCompaction(op, oldToNew, oldBatch, newBatch, moves);
    CompactTensor const tensor{base, rowBytes, static_cast<uint64_t>(rows)};
    backend.compactRows(&tensor, 1, moves.data(), static_cast<int32_t>(moves.size()));
}

void rebaseExecutionRowIndices(DeviceBackend& backend, int32_t* indices, int64_t count, int32_t const* oldToNew,
                               int32_t oldBatch, int32_t newBatch, int32_t rowsPerSequence) {
    std::vector<RowMove> moves;
    planCompaction("rebaseExecutionRowIndices", oldToNew, oldBatch, newBatch, moves);
    backend.rebaseExecutionRows(indices, count, oldToNew, oldBatch, rowsPerSequence);
}

}  // namespace ctxcache::device
