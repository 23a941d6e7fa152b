// CacheRecord: the resources a record lists (one per page and snapshot slot, in path order) and validate(),
// which checks the invariants stated in include/ctxcache/cache_record.h and throws ContractError on the first
// broken one. Pure functions of the record; no shared state.

#include "ctxcache/cache_record.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {

std::vector<ResourceId> CacheRecordCore::resources() const {
    std::vector<ResourceId> result;
    result.reserve(basePagePath.size() + draftPagePath.size() + 2);
    forEachResource([&](ResourceId const& id) { result.push_back(id); });
    return result;
}

std::optional<HybridCheckpointKey> CacheRecordCore::hybridKey() const {
    if (!exactCheckpointLength) return std::nullopt;
    return HybridCheckpointKey{key.terminalHash, *exactCheckpointLength};
}

void CacheRecord::validate() const {
    auto fail = [](std::string const& why) { throw ContractError("CacheRecord: " + why); };
    if (key.fullBlockCount < 0) fail("fullBlockCount is negative");
    if (logicalBlockHashes.size() != static_cast<size_t>(key.fullBlockCount))
        fail("logicalBlockHashes has " + std::to_string(logicalBlockHashes.size()) + " entries, fullBlockCount is " +
             std::to_string(key.fullBlockCount));
    if (isHybrid()) {
        if (*exactCheckpointLength <= 0) fail("exactCheckpointLength must be positive");
        if (!recurrentSnapshotSlot) fail("a hybrid checkpoint needs a recurrent snapshot slot");
    } else {
        if (key.fullBlockCount == 0) fail("a non-hybrid record needs at least one full block");
        if (key.terminalHash != logicalBlockHashes.back()) fail("terminalHash is not the last logical block hash");
        if (recurrentSnapshotSlot || partialKvSnapshotSlot) fail("snapshot slots need a hybrid checkpoint length");
    }
    if (!basePagePath.empty() && basePagePath.size() != logicalBlockHashes.size())
        fail("basePagePath must be empty or as long as the logical path");
    if (!isHybrid() && basePagePath.empty()) fail("a non-hybrid record needs its base path");
    if (!draftPagePath.empty() && draftPagePath.size() != basePagePath.size())
        fail("draftPagePath must be empty or as long as basePagePath");
    if (hybridMtpCheckpoint) {
        if (!isHybrid()) fail("an MTP checkpoint needs a hybrid checkpoint length");
        if (!partialKvSnapshotSlot) fail("an MTP checkpoint needs a partial-KV snapshot slot");
        if (basePagePath.size() != logicalBlockHashes.size() || draftPagePath.size() != logicalBlockHashes.size())
            fail("an MTP checkpoint needs base and draft paths as long as its logical path (" +
                 std::to_string(basePagePath.size()) + " base, " + std::to_string(draftPagePath.size()) + " draft, " +
                 std::to_string(logicalBlockHashes.size()) + " logical)");
        if (key.fullBlockCount > 0 && key.fullBlockCount >= *exactCheckpointLength)
            fail("an MTP checkpoint's full blocks must end before its boundary token (fullBlockCount " +
                 std::to_string(key.fullBlockCount) + ", exactCheckpointLength " +
                 std::to_string(*exactCheckpointLength) + ")");
    } else if (isHybrid() && !draftPagePath.empty()) {
        fail("a hybrid checkpoint has a draft path only as an MTP checkpoint");
    }
    for (PageId page : basePagePath)
        if (page < 0) fail("negative base page id");
    for (PageId page : draftPagePath)
        if (page < 0) fail("negative draft page id");
    if (recurrentSnapshotSlot && *recurrentSnapshotSlot < 0) fail("negative recurrent snapshot slot");
    if (partialKvSnapshotSlot && *partialKvSnapshotSlot < 0) fail("negative partial-KV snapshot slot");
}

}  // namespace ctxcache
