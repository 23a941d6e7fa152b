// DraftPathIndex: hash -> list of {record, boundary} entries, one per boundary of every draft-paired record.
// insert checks for duplicates before it changes anything and undoes a partial insert if an allocation fails;
// memoryBytes is kept up to date incrementally. Full contract (invariants, errors, cost, threading):
// include/ctxcache/draft_path_index.h.

#include "ctxcache/draft_path_index.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {

void DraftPathIndex::insert(CacheRecord const& record) {
    size_t const length = record.logicalBlockHashes.size();
    if (record.draftPagePath.empty() || record.draftPagePath.size() != length)
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record.id) +
                            " needs a draft path as long as its logical path");
    for (size_t i = 0; i < length; ++i)
        if (contains(record.logicalBlockHashes[i], {record.id, static_cast<int32_t>(i + 1)}))
            throw ContractError("DraftPathIndex::insert: record " + std::to_string(record.id) + " boundary " +
                                std::to_string(i + 1) + " is already indexed");
    size_t inserted = 0;
    try {
        for (; inserted < length; ++inserted) {
            std::vector<DraftPathMatch>& matches = byHash_[record.logicalBlockHashes[inserted]];
            size_t const before = matches.capacity();
            matches.push_back({record.id, static_cast<int32_t>(inserted + 1)});
            matchCapacity_ += matches.capacity() - before;
        }
    } catch (...) {
        for (size_t i = 0; i < inserted; ++i) {
            auto it = byHash_.find(record.logicalBlockHashes[i]);
            it->second.pop_back();
            if (it->second.empty()) {
                matchCapacity_ -= it->second.capacity();
                byHash_.erase(it);
            }
        }
        throw;
    }
    entries_ += length;
}

std::optional<DraftPathMatch> DraftPathIndex::lookupLongest(BlockHashSpan hashes, int32_t maxBlockCount) const {
    int32_t const limit = static_cast<int32_t>(std::min<int64_t>(maxBlockCount, static_cast<int64_t>(hashes.size)));
    for (int32_t count = limit; count >= 1; --count) {
        auto it = byHash_.find(hashes[static_cast<size_t>(count - 1)]);
        if (it == byHash_.end()) continue;
        auto const& matches = it->second;
        for (auto m = matches.rbegin(); m != matches.rend(); ++m)
            if (m->pathBlockCount == count) return *m;
    }
    return std::nullopt;
}

bool DraftPathIndex::contains(BlockHash const& terminalHash, DraftPathMatch const& match) const {
    auto it = byHash_.find(terminalHash);
    if (it == byHash_.end()) return false;
    return std::find(it->second.begin(), it->second.end(), match) != it->second.end();
}

void DraftPathIndex::erase(CacheRecord const& record) {
    if (record.draftPagePath.empty()) return;
    eraseBoundaries(record.id, 0, record.logicalBlockHashes.data(), record.logicalBlockHashes.size());
}

void DraftPathIndex::eraseBoundaries(RecordId record, int32_t firstBlock, BlockHash const* hashes, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        auto it = byHash_.find(hashes[i]);
        if (it == byHash_.end()) continue;
        auto& matches = it->second;
        auto m =
            std::find(matches.begin(), matches.end(), DraftPathMatch{record, firstBlock + static_cast<int32_t>(i + 1)});
        if (m == matches.end()) continue;
        matches.erase(m);
        --entries_;
        if (matches.empty()) {
            matchCapacity_ -= matches.capacity();
            byHash_.erase(it);
        }
    }
}

namespace {
// One node of byHash_: its payload, two pointers and the allocator's 16-byte header.
constexpr size_t kNodeBytes = sizeof(std::pair<BlockHash const, std::vector<DraftPathMatch>>) + 2 * sizeof(void*) + 16;
}  // namespace

size_t DraftPathIndex::memoryBytes() const noexcept {
    return byHash_.bucket_count() * sizeof(void*) + byHash_.size() * kNodeBytes +
           matchCapacity_ * sizeof(DraftPathMatch);
}

void DraftPathIndex::checkInvariants() const {
    size_t entries = 0, capacity = 0;
    for (auto const& [hash, matches] : byHash_) {
        entries += matches.size();
        capacity += matches.capacity();
    }
    if (entries != entries_)
        throw InvariantError("DraftPathIndex: " + std::to_string(entries) + " entries but counted " +
                             std::to_string(entries_));
    if (capacity != matchCapacity_)
        throw InvariantError("DraftPathIndex: match storage is " + std::to_string(capacity) +
                             " entries but accounted " + std::to_string(matchCapacity_));
}

}  // namespace ctxcache
