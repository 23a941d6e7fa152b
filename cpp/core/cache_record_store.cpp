// CacheRecordStore: records by id (unordered_map), the exact-key, hybrid-key and MTP-key indexes (flat hash
// tables), the LRU (std::list, least recent at the front; touch is a splice), and two hybrid side tables (plain
// and MTP checkpoints alike) kept in step with the records: stored lengths with their counts
// (hybridCandidateLengths(n)) and lengths per anchor block, the last full block a checkpoint hangs off
// (hybridCandidateLengths(n, hashes)). insert undoes its partial work if an allocation fails, leaving the store
// unchanged. With a hash source, a record with a base path is stored without its logical hashes: logicalHash reads
// block i's from the source's page -> hash reverse entry of basePagePath[i]. Full contract (invariants, errors, cost,
// threading): include/ctxcache/cache_record_store.h.

#include "ctxcache/cache_record_store.h"

#include <algorithm>
#include <string>

#include "ctxcache/base_block_index.h"
#include "ctxcache/errors.h"

namespace ctxcache {

namespace {

// One block's term of the published-hash digest: the hash folded to 64 bits with its position, times an odd
// constant (one multiply: publication computes a term per block). The sum over blocks tells a changed or a moved
// block apart (a changed fold always changes its term), and a trim subtracts the blocks it cuts.
uint64_t digestTerm(BlockHash const& hash, size_t block) noexcept {
    uint64_t const fold = hash.lo ^ ((hash.hi << 29) | (hash.hi >> 35)) ^ ((block + 1) * 0x9E3779B97F4A7C15ull);
    return fold * 0xD6E8FEB86659FD93ull;
}

// anchorOf for a record in its full form (at insertion).
CacheRecordKey fullRecordAnchor(CacheRecord const& record) {
    int32_t const blocks = record.key.fullBlockCount;
    return {blocks > 0 ? record.logicalBlockHashes.back() : kChainRoot, blocks};
}

}  // namespace

CacheRecordStore::CacheRecordStore(int32_t maxRecords, BaseBlockIndex const* hashSource)
    : maxRecords_(maxRecords), hashSource_(hashSource) {
    if (maxRecords < 0) throw ContractError("CacheRecordStore: maxRecords must be non-negative");
}

uint64_t CacheRecordStore::hashDigest(BlockHashSpan hashes) noexcept {
    uint64_t digest = 0;
    for (size_t i = 0; i < hashes.size; ++i) digest += digestTerm(hashes[i], i);
    return digest;
}

CacheRecordKey CacheRecordStore::anchorOf(StoredRecord const& record) const {
    int32_t const blocks = record.key.fullBlockCount;
    return {blocks > 0 ? logicalHash(record, static_cast<size_t>(blocks - 1)) : kChainRoot, blocks};
}

BlockHash CacheRecordStore::logicalHash(StoredRecord const& record, size_t block) const {
    if (block >= static_cast<size_t>(record.key.fullBlockCount))
        throw ContractError("CacheRecordStore::logicalHash: record " + std::to_string(record.id) + " has " +
                            std::to_string(record.key.fullBlockCount) + " blocks, asked for block " +
                            std::to_string(block));
    if (!derivesHashes(record)) return record.keptBlockHashes[block];
    PageId const page = record.basePagePath[block];
    std::optional<BlockHash> hash = hashSource_->hashOfPage(page);
    if (!hash)
        throw InvariantError("CacheRecordStore: record " + std::to_string(record.id) + " block " +
                             std::to_string(block) + ": base page " + std::to_string(page) +
                             " has no hash in the base index");
    return *hash;
}

void CacheRecordStore::appendLogicalHashes(StoredRecord const& record, size_t from, size_t to,
                                           std::vector<BlockHash>& out) const {
    if (from > to || to > static_cast<size_t>(record.key.fullBlockCount))
        throw ContractError("CacheRecordStore::appendLogicalHashes: record " + std::to_string(record.id) + " has " +
                            std::to_string(record.key.fullBlockCount) + " blocks, asked for [" + std::to_string(from) +
                            ", " + std::to_string(to) + ")");
    out.reserve(out.size() + (to - from));
    if (!derivesHashes(record)) {
        out.insert(out.end(), record.keptBlockHashes.begin() + static_cast<std::ptrdiff_t>(from),
                   record.keptBlockHashes.begin() + static_cast<std::ptrdiff_t>(to));
        return;
    }
    constexpr size_t kAhead = 8;  // reverse entries loading ahead of the reads
    for (size_t i = from; i < std::min(to, from + kAhead); ++i) hashSource_->prefetchReverse(record.basePagePath[i]);
    for (size_t i = from; i < to; ++i) {
        if (i + kAhead < to) hashSource_->prefetchReverse(record.basePagePath[i + kAhead]);
        out.push_back(logicalHash(record, i));
    }
}

CacheRecord CacheRecordStore::materialize(StoredRecord const& record) const {
    CacheRecord full;
    static_cast<CacheRecordCore&>(full) = record;
    appendLogicalHashes(record, 0, static_cast<size_t>(record.key.fullBlockCount), full.logicalBlockHashes);
    return full;
}

CacheRecordStore::Entry& CacheRecordStore::entry(RecordId id, char const* operation) {
    auto it = records_.find(id);
    if (it == records_.end())
        throw ContractError(std::string("CacheRecordStore::") + operation + ": no record " + std::to_string(id));
    return it->second;
}

RecordInsertResult CacheRecordStore::insert(CacheRecord const& record, int32_t priority) {
    if (priority < kMinRetentionPriority || priority > kMaxRetentionPriority)
        throw ContractError("CacheRecordStore::insert: priority " + std::to_string(priority) + " is outside 0..100");
    record.validate();
    bool const mtp = record.isHybridMtp();
    if (auto hybrid = record.hybridKey()) {
        if (RecordId const* existing = checkpointIndex(mtp).find(*hybrid)) {
            RecordId const existingId = *existing;
            touch(existingId);
            return {existingId, false};
        }
    } else if (auto existing = find(record.key)) {
        touch(*existing);
        return {*existing, false};
    }
    if (nextId_ == 0) throw ContractError("CacheRecordStore::insert: record ids wrapped around");
    bool const derived = derivesHashes(record);
    // One O(1) spot check of the derivation's precondition (checkInvariants checks every block).
    if (derived && hashSource_->hashOfPage(record.basePagePath.back()) != record.logicalBlockHashes.back())
        throw ContractError("CacheRecordStore::insert: base page " + std::to_string(record.basePagePath.back()) +
                            " is not the canonical page of the record's last block hash");
    RecordId const id = nextId_;
    auto hybrid = record.hybridKey();
    // Allocate everything first, then link: an allocation failure leaves the store unchanged.
    StoredRecord stored;
    static_cast<CacheRecordCore&>(stored) = record;
    stored.id = id;
    if (!derived) stored.keptBlockHashes = record.logicalBlockHashes;
    stored.publishedHashDigest = hashDigest(record.logicalBlockHashes);
    // The node waits in parked_ until everything else is in place; placeAtBack then splices it (no allocation).
    parked_.push_back(id);
    auto lruPosition = std::prev(parked_.end());
    try {
        auto [it, inserted] = records_.emplace(id, Entry{std::move(stored), lruPosition, 0, priority, false});
        (void)inserted;
        try {
            if (hybrid) {
                checkpointIndex(mtp).tryEmplace(*hybrid, id);
                std::vector<int32_t>& lengths = hybridAnchors_[fullRecordAnchor(record)];
                lengths.push_back(hybrid->exactLength);
                ++hybridLengths_[hybrid->exactLength];  // last: nothing after it can throw
            } else {
                exactIndex_.tryEmplace(it->second.record.key, id);
            }
        } catch (...) {
            if (hybrid) {
                checkpointIndex(mtp).erase(*hybrid);
                auto anchor = hybridAnchors_.find(fullRecordAnchor(record));
                if (anchor != hybridAnchors_.end()) {
                    auto& lengths = anchor->second;
                    auto at = std::find(lengths.begin(), lengths.end(), hybrid->exactLength);
                    if (at != lengths.end()) lengths.erase(at);
                    if (lengths.empty()) hybridAnchors_.erase(anchor);
                }
            }
            records_.erase(it);
            throw;
        }
    } catch (...) {
        parked_.erase(lruPosition);
        throw;
    }
    ++nextId_;
    Entry& e = records_.find(id)->second;
    e.stamp = ++tick_;
    placeAtBack(e);
    return {id, true};
}

std::optional<RecordId> CacheRecordStore::find(CacheRecordKey const& key) const {
    if (RecordId const* id = exactIndex_.find(key)) return *id;
    return std::nullopt;
}

std::optional<RecordId> CacheRecordStore::findHybrid(HybridCheckpointKey const& key) const {
    if (RecordId const* id = hybridIndex_.find(key)) return *id;
    return std::nullopt;
}

std::optional<RecordId> CacheRecordStore::findHybridMtp(HybridCheckpointKey const& key) const {
    if (RecordId const* id = mtpIndex_.find(key)) return *id;
    return std::nullopt;
}

std::vector<int32_t> CacheRecordStore::hybridCandidateLengths(int32_t inputTokenCount) const {
    std::vector<int32_t> lengths;
    for (auto it = hybridLengths_.upper_bound(inputTokenCount); it != hybridLengths_.end(); ++it)
        lengths.push_back(it->first);
    return lengths;
}

std::vector<int32_t> CacheRecordStore::hybridCandidateLengths(int32_t inputTokenCount,
                                                              BlockHashSpan inputFullBlockHashes) const {
    std::vector<int32_t> lengths;
    if (hybridAnchors_.empty()) return lengths;
    for (size_t blocks = 0; blocks <= inputFullBlockHashes.size; ++blocks) {
        CacheRecordKey const anchor{blocks > 0 ? inputFullBlockHashes[blocks - 1] : kChainRoot,
                                    static_cast<int32_t>(blocks)};
        auto it = hybridAnchors_.find(anchor);
        if (it == hybridAnchors_.end()) continue;
        for (int32_t length : it->second)
            if (length < inputTokenCount) lengths.push_back(length);
    }
    std::sort(lengths.begin(), lengths.end(), std::greater<int32_t>());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    return lengths;
}

StoredRecord const& CacheRecordStore::get(RecordId id) const {
    return const_cast<CacheRecordStore*>(this)->entry(id, "get").record;
}

std::optional<RecordId> CacheRecordStore::leastRecent() const noexcept {
    if (lru_.empty()) return std::nullopt;
    return lru_.front();
}

void CacheRecordStore::touch(RecordId id) { makeMostRecent(entry(id, "touch")); }

void CacheRecordStore::makeMostRecent(Entry& e) {
    e.stamp = ++tick_;
    if (!e.listed) return;  // a pinned record: it keeps its recency for when it is listed again
    Bucket const& b = buckets_[static_cast<size_t>(e.priority)];
    if (b.last == e.lruPosition) return;  // already the bucket's most recent
    leaveBucket(e);
    placeAtBack(e);
}

int32_t CacheRecordStore::priority(RecordId id) const {
    return const_cast<CacheRecordStore*>(this)->entry(id, "priority").priority;
}

bool CacheRecordStore::isListed(RecordId id) const {
    return const_cast<CacheRecordStore*>(this)->entry(id, "isListed").listed;
}

void CacheRecordStore::setPriority(RecordId id, int32_t priority) {
    Entry& e = entry(id, "setPriority");
    if (priority < kMinRetentionPriority || priority > kMaxRetentionPriority)
        throw ContractError("CacheRecordStore::setPriority: priority " + std::to_string(priority) +
                            " is outside 0..100");
    if (priority == e.priority) return;
    if (!e.listed) {
        e.priority = priority;
        return;
    }
    leaveBucket(e);
    e.priority = priority;
    placeByRecency(e);
}

void CacheRecordStore::unlist(RecordId id) {
    Entry& e = entry(id, "unlist");
    if (!e.listed) return;
    leaveBucket(e);
    parked_.splice(parked_.end(), lru_, e.lruPosition);
    e.listed = false;
}

void CacheRecordStore::relist(RecordId id) {
    Entry& e = entry(id, "relist");
    if (!e.listed) placeByRecency(e);
}

std::list<RecordId>::iterator CacheRecordStore::bucketEnd(int32_t priority) {
    // The first record of the lowest non-empty bucket above `priority`, or the end.
    for (int word = (priority + 1) / 64; word < 2; ++word) {
        uint64_t bits = nonEmpty_[word];
        if (word == (priority + 1) / 64) bits &= ~uint64_t{0} << ((priority + 1) % 64);
        if (bits != 0) return buckets_[static_cast<size_t>(word * 64 + __builtin_ctzll(bits))].first;
    }
    return lru_.end();
}

void CacheRecordStore::leaveBucket(Entry& e) noexcept {
    Bucket& b = buckets_[static_cast<size_t>(e.priority)];
    if (--b.count == 0) {
        nonEmpty_[e.priority / 64] &= ~(uint64_t{1} << (e.priority % 64));
        return;
    }
    if (b.first == e.lruPosition) b.first = std::next(e.lruPosition);
    if (b.last == e.lruPosition) b.last = std::prev(e.lruPosition);
}

void CacheRecordStore::placeBefore(Entry& e, std::list<RecordId>::iterator pos, bool front, bool back) noexcept {
    lru_.splice(pos, e.listed ? lru_ : parked_, e.lruPosition);  // the node (and its iterator) moves as it is
    e.listed = true;
    Bucket& b = buckets_[static_cast<size_t>(e.priority)];
    if (b.count++ == 0) {
        b.first = b.last = e.lruPosition;
        nonEmpty_[e.priority / 64] |= uint64_t{1} << (e.priority % 64);
        return;
    }
    if (front) b.first = e.lruPosition;
    if (back) b.last = e.lruPosition;
}

void CacheRecordStore::placeAtBack(Entry& e) noexcept { placeBefore(e, bucketEnd(e.priority), false, true); }

void CacheRecordStore::placeByRecency(Entry& e) {
    Bucket const& b = buckets_[static_cast<size_t>(e.priority)];
    if (b.count == 0 || stampOf(*b.last) < e.stamp) {
        placeAtBack(e);
        return;
    }
    // Walk in from both ends at once: the cost is twice the distance to the nearer end.
    auto forward = b.first;
    auto backward = b.last;
    for (;;) {
        if (stampOf(*forward) > e.stamp) {
            placeBefore(e, forward, forward == b.first, false);
            return;
        }
        if (stampOf(*backward) < e.stamp) {
            placeBefore(e, std::next(backward), false, backward == b.last);
            return;
        }
        ++forward;
        --backward;
    }
}

uint64_t CacheRecordStore::stampOf(RecordId id) const { return records_.find(id)->second.stamp; }

void CacheRecordStore::setDraftState(RecordId id, std::vector<PageId> draftPagePath) {
    Entry& e = entry(id, "setDraftState");
    if (e.record.hasDraftPath())
        throw ContractError("CacheRecordStore::setDraftState: record " + std::to_string(id) +
                            " already has a draft path");
    if (e.record.isHybrid())
        throw ContractError("CacheRecordStore::setDraftState: record " + std::to_string(id) +
                            " is a hybrid checkpoint");
    if (draftPagePath.size() != e.record.basePagePath.size())
        throw ContractError("CacheRecordStore::setDraftState: draft path has " + std::to_string(draftPagePath.size()) +
                            " pages, the base path " + std::to_string(e.record.basePagePath.size()));
    for (PageId page : draftPagePath)
        if (page < 0) throw ContractError("CacheRecordStore::setDraftState: negative draft page id");
    e.record.draftPagePath = std::move(draftPagePath);
    makeMostRecent(e);
}

StoredRecord CacheRecordStore::erase(RecordId id) {
    Entry& e = entry(id, "erase");
    // The anchor is read first: everything after it is a removal that cannot throw.
    std::optional<CacheRecordKey> const anchorKey =
        e.record.isHybrid() ? std::optional<CacheRecordKey>(anchorOf(e.record)) : std::nullopt;
    StoredRecord record = std::move(e.record);
    if (e.listed) {
        leaveBucket(e);
        lru_.erase(e.lruPosition);
    } else {
        parked_.erase(e.lruPosition);
    }
    if (auto hybrid = record.hybridKey()) {
        checkpointIndex(record.isHybridMtp()).erase(*hybrid);
        auto it = hybridLengths_.find(hybrid->exactLength);
        if (it != hybridLengths_.end() && --it->second == 0) hybridLengths_.erase(it);
        auto anchor = hybridAnchors_.find(*anchorKey);
        if (anchor != hybridAnchors_.end()) {
            auto& lengths = anchor->second;
            auto at = std::find(lengths.begin(), lengths.end(), hybrid->exactLength);
            if (at != lengths.end()) lengths.erase(at);
            if (lengths.empty()) hybridAnchors_.erase(anchor);
        }
    } else {
        exactIndex_.erase(record.key);
    }
    records_.erase(id);
    return record;
}

CacheRecordStore::TrimmedTail CacheRecordStore::trimTail(RecordId id, int32_t keepBlocks) {
    Entry& e = entry(id, "trimTail");
    StoredRecord& record = e.record;
    std::string const what = "CacheRecordStore::trimTail: record " + std::to_string(id);
    if (record.isHybrid()) throw ContractError(what + " is a hybrid checkpoint");
    if (keepBlocks < 1 || keepBlocks >= record.key.fullBlockCount)
        throw ContractError(what + ": keepBlocks " + std::to_string(keepBlocks) + " outside [1, " +
                            std::to_string(record.key.fullBlockCount) + ")");
    size_t const keep = static_cast<size_t>(keepBlocks);
    CacheRecordKey const shorter{logicalHash(record, keep - 1), keepBlocks};
    if (exactIndex_.contains(shorter)) throw ContractError(what + ": another record already ends at that block");
    // The digest loses the cut blocks' terms (their hashes as the source now derives them: a block that no longer
    // derives its published hash leaves the digest wrong, and checkInvariants still reports the record).
    uint64_t digest = record.publishedHashDigest;
    size_t const blocks = static_cast<size_t>(record.key.fullBlockCount);
    constexpr size_t kAhead = 8;  // reverse entries loading ahead of the reads
    if (derivesHashes(record))
        for (size_t i = keep; i < std::min(blocks, keep + kAhead); ++i)
            hashSource_->prefetchReverse(record.basePagePath[i]);
    for (size_t i = keep; i < blocks; ++i) {
        if (derivesHashes(record) && i + kAhead < blocks) hashSource_->prefetchReverse(record.basePagePath[i + kAhead]);
        digest -= digestTerm(logicalHash(record, i), i);
    }
    // Allocate first (the tail copies, the new key's slot): nothing is changed before the last of them.
    TrimmedTail tail;
    tail.firstBlock = keepBlocks;
    auto const cut = static_cast<std::ptrdiff_t>(keep);
    tail.basePages.assign(record.basePagePath.begin() + cut, record.basePagePath.end());
    if (record.hasDraftPath()) tail.draftPages.assign(record.draftPagePath.begin() + cut, record.draftPagePath.end());
    exactIndex_.tryEmplace(shorter, id);
    exactIndex_.erase(record.key);
    record.key = shorter;
    record.publishedHashDigest = digest;
    if (!record.keptBlockHashes.empty()) record.keptBlockHashes.resize(keep);
    record.basePagePath.resize(keep);
    if (record.hasDraftPath()) record.draftPagePath.resize(keep);
    // Non-binding and exception-safe in libstdc++: the tail's storage goes back when it can.
    record.keptBlockHashes.shrink_to_fit();
    record.basePagePath.shrink_to_fit();
    record.draftPagePath.shrink_to_fit();
    return tail;
}

void CacheRecordStore::checkInvariants() const {
    if (lru_.size() + parked_.size() != records_.size())
        throw InvariantError("CacheRecordStore: LRU holds " + std::to_string(lru_.size()) + " ids and " +
                             std::to_string(parked_.size()) + " are unlisted for " + std::to_string(records_.size()) +
                             " records");
    // The eviction order: priority buckets ascending, each least recent first, and each bucket's bookkeeping.
    std::array<uint32_t, kRetentionPriorityCount> counts{};
    int32_t lastPriority = -1;
    uint64_t lastStamp = 0;
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        auto rec = records_.find(*it);
        if (rec == records_.end())
            throw InvariantError("CacheRecordStore: LRU holds unknown record " + std::to_string(*it));
        Entry const& e = rec->second;
        if (e.lruPosition != it || !e.listed)
            throw InvariantError("CacheRecordStore: record " + std::to_string(*it) + " is in the LRU twice");
        if (e.stamp > tick_ || e.priority < lastPriority || (e.priority == lastPriority && e.stamp <= lastStamp))
            throw InvariantError("CacheRecordStore: record " + std::to_string(*it) + " (priority " +
                                 std::to_string(e.priority) + ") is out of eviction order");
        Bucket const& b = buckets_[static_cast<size_t>(e.priority)];
        if (counts[static_cast<size_t>(e.priority)]++ == 0 && b.first != it)
            throw InvariantError("CacheRecordStore: priority " + std::to_string(e.priority) +
                                 "'s first record is not " + std::to_string(*it));
        if (std::next(it) == lru_.end() || records_.find(*std::next(it))->second.priority != e.priority)
            if (b.last != it)
                throw InvariantError("CacheRecordStore: priority " + std::to_string(e.priority) +
                                     "'s last record is not " + std::to_string(*it));
        lastPriority = e.priority;
        lastStamp = e.stamp;
    }
    for (int32_t p = 0; p < kRetentionPriorityCount; ++p) {
        bool const bit = (nonEmpty_[p / 64] >> (p % 64)) & 1;
        if (buckets_[static_cast<size_t>(p)].count != counts[static_cast<size_t>(p)] ||
            bit != (counts[static_cast<size_t>(p)] > 0))
            throw InvariantError("CacheRecordStore: priority " + std::to_string(p) + " counts " +
                                 std::to_string(buckets_[static_cast<size_t>(p)].count) + " records, the LRU holds " +
                                 std::to_string(counts[static_cast<size_t>(p)]));
    }
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
        auto rec = records_.find(*it);
        if (rec == records_.end() || rec->second.listed || rec->second.lruPosition != it)
            throw InvariantError("CacheRecordStore: unlisted record " + std::to_string(*it) + " is misfiled");
    }
    size_t hybrids = 0, mtps = 0;
    std::map<int32_t, int32_t, std::greater<int32_t>> lengths;
    for (auto const& [id, e] : records_) {
        if (e.record.id != id || id == kNoRecord || id >= nextId_)
            throw InvariantError("CacheRecordStore: record stored under id " + std::to_string(id) + " has id " +
                                 std::to_string(e.record.id));
        bool const derived = derivesHashes(e.record);
        if (derived ? !e.record.keptBlockHashes.empty()
                    : e.record.keptBlockHashes.size() != static_cast<size_t>(e.record.key.fullBlockCount))
            throw InvariantError(
                "CacheRecordStore: record " + std::to_string(id) + " keeps " +
                std::to_string(e.record.keptBlockHashes.size()) + " hashes, expected " +
                (derived ? std::string("none (derivable)") : std::to_string(e.record.key.fullBlockCount)));
        try {
            // Every derivable hash must exist (materialize throws InvariantError for an unmapped page) and the
            // record must be valid with them: its key ends at the derived last hash; and they must be the hashes
            // it was published with, every block of them (the digest).
            CacheRecord const full = materialize(e.record);
            full.validate();
            if (hashDigest(full.logicalBlockHashes) != e.record.publishedHashDigest)
                throw InvariantError("CacheRecordStore: record " + std::to_string(id) + "'s " +
                                     std::to_string(full.logicalBlockHashes.size()) +
                                     (derived ? " hashes derived from its base pages" : " kept hashes") +
                                     " are not the ones it was published with: a page it holds is the canonical "
                                     "page of another hash");
        } catch (ContractError const& error) {
            throw InvariantError(std::string("CacheRecordStore: record ") + std::to_string(id) +
                                 " invalid: " + error.what());
        }
        if (auto hybrid = e.record.hybridKey()) {
            ++hybrids;
            bool const mtp = e.record.isHybridMtp();
            if (mtp) ++mtps;
            ++lengths[hybrid->exactLength];
            RecordId const* indexed = checkpointIndex(mtp).find(*hybrid);
            if (!indexed || *indexed != id)
                throw InvariantError("CacheRecordStore: hybrid record " + std::to_string(id) + " missing from the " +
                                     (mtp ? "MTP" : "hybrid") + " checkpoint index");
        } else {
            RecordId const* indexed = exactIndex_.find(e.record.key);
            if (!indexed || *indexed != id)
                throw InvariantError("CacheRecordStore: record " + std::to_string(id) +
                                     " missing from the exact-key index");
        }
    }
    if (hybridIndex_.size() != hybrids - mtps || mtpIndex_.size() != mtps ||
        exactIndex_.size() != records_.size() - hybrids)
        throw InvariantError("CacheRecordStore: key indexes hold entries of no record");
    if (lengths != hybridLengths_) throw InvariantError("CacheRecordStore: hybrid length counts are stale");
    size_t anchored = 0;
    for (auto const& [anchor, anchorLengths] : hybridAnchors_) anchored += anchorLengths.size();
    if (anchored != hybrids)
        throw InvariantError("CacheRecordStore: hybrid anchors hold " + std::to_string(anchored) + " lengths for " +
                             std::to_string(hybrids) + " hybrid records");
    for (auto const& [id, e] : records_) {
        if (!e.record.isHybrid()) continue;
        auto anchor = hybridAnchors_.find(anchorOf(e.record));
        if (anchor == hybridAnchors_.end() || std::find(anchor->second.begin(), anchor->second.end(),
                                                        *e.record.exactCheckpointLength) == anchor->second.end())
            throw InvariantError("CacheRecordStore: hybrid record " + std::to_string(id) + " is not anchored");
    }
}

size_t CacheRecordStore::memoryBytes() const noexcept {
    // Node-based containers: count each node's payload plus two pointers and the allocator's 16-byte header.
    constexpr size_t kNodeOverhead = 2 * sizeof(void*) + 16;
    size_t bytes = exactIndex_.memoryBytes() + hybridIndex_.memoryBytes() + mtpIndex_.memoryBytes();
    bytes += records_.bucket_count() * sizeof(void*);
    bytes += records_.size() * (sizeof(std::pair<RecordId const, Entry>) + kNodeOverhead);
    bytes += (lru_.size() + parked_.size()) * (sizeof(RecordId) + kNodeOverhead);
    bytes += hybridLengths_.size() * (sizeof(std::pair<int32_t const, int32_t>) + 4 * sizeof(void*) + 16);
    bytes += hybridAnchors_.bucket_count() * sizeof(void*);
    for (auto const& [anchor, lengths] : hybridAnchors_)
        bytes += sizeof(std::pair<CacheRecordKey const, std::vector<int32_t>>) + kNodeOverhead +
                 lengths.capacity() * sizeof(int32_t);
    for (auto const& [id, e] : records_) {
        bytes += e.record.keptBlockHashes.capacity() * sizeof(BlockHash);
        bytes += e.record.basePagePath.capacity() * sizeof(PageId);
        bytes += e.record.draftPagePath.capacity() * sizeof(PageId);
    }
    return bytes;
}

}  // namespace ctxcache
