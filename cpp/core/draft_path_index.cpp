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
        for (; inserted < length; ++inserted)
            byHash_[record.logicalBlockHashes[inserted]].push_back({record.id, static_cast<int32_t>(inserted + 1)});
    } catch (...) {
        for (size_t i = 0; i < inserted; ++i) {
            auto it = byHash_.find(record.logicalBlockHashes[i]);
            it->second.pop_back();
            if (it->second.empty()) byHash_.erase(it);
        }
        throw;
    }
    entries_ += length;
}

std::optional<DraftPathMatch> DraftPathIndex::lookupLongest(BlockHashSpan hashes,
                                                            int32_t maxBlockCount) const {
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
    for (size_t i = 0; i < record.logicalBlockHashes.size(); ++i) {
        auto it = byHash_.find(record.logicalBlockHashes[i]);
        if (it == byHash_.end()) continue;
        auto& matches = it->second;
        auto m = std::find(matches.begin(), matches.end(), DraftPathMatch{record.id, static_cast<int32_t>(i + 1)});
        if (m == matches.end()) continue;
        matches.erase(m);
        --entries_;
        if (matches.empty()) byHash_.erase(it);
    }
}

size_t DraftPathIndex::memoryBytes() const noexcept {
    size_t bytes = byHash_.bucket_count() * sizeof(void*);
    for (auto const& [hash, matches] : byHash_)
        bytes += sizeof(std::pair<BlockHash const, std::vector<DraftPathMatch>>) + 2 * sizeof(void*) + 16 +
                 matches.capacity() * sizeof(DraftPathMatch);
    return bytes;
}

}  // namespace ctxcache
