// CacheRecordStore: the published records, their exact-endpoint and hybrid-checkpoint indexes, and the
// record-granular LRU. Records are kept compact (StoredRecord): given a hash source (the manager's BaseBlockIndex),
// the store keeps no logical hash of a record with a base path and derives block i's hash from its canonical page
// (logicalHash, materialize); a pure-recurrent checkpoint (no pages) keeps its hashes. Without a hash source every
// record keeps its hashes.
//
// Invariants: every record is in exactly one key index (plain hybrid checkpoints in the hybrid index, Hybrid+MTP
//             checkpoints in the MTP index, the others in the exact-key index; so a plain and an MTP checkpoint
//             of one exact prefix may coexist and neither is ever found as the other) and exactly once in the LRU list
//             (least recent at the front) or, unlisted (pinned), outside it; the LRU is ordered by priority bucket
//             (0 first), then by recency (each record's stamp, strictly increasing within a bucket), and each
//             bucket's first/last/count describe its run; ids start at 1 and increase. The store does not enforce
//             maxRecords: the manager does (one transient extra is allowed while a publication commits). With a hash
//             source: while a record holds base page p, the source maps p to the record's logical hash at that block
//             (the manager keeps a canonical mapping while its page holds a cache reference), and a record keeps
//             its hashes exactly when it has no base path. checkInvariants checks every block: each record
//             keeps a 64-bit digest of the hashes it was inserted with (publishedHashDigest, updated by trimTail)
//             and its derived hashes must reproduce it, so a page of the record that the source has mapped to
//             another hash is reported even where the key and the last block still agree.
// Errors:     insert of an invalid record (or, with a hash source, one whose last base page is not mapped to
//             its last hash), get/touch/erase/setDraftState/materialize of an unknown id: ContractError, nothing
//             changed. A derivable hash whose page the source does not map: InvariantError (corrupt state).
// Cost:       insert/find/touch/erase O(1) expected plus the record's size (insert folds the hashes it is given
//             into the digest: one multiply per block, no memory read beyond them; trimTail reads the cut
//             blocks' reverse entries); logicalHash O(1) (one reverse-array read); materialize O(blocks);
//             hybridCandidateLengths(n) O(distinct stored lengths below n), hybridCandidateLengths(n, hashes)
//             O(input blocks + results).
// Threading:  single writer, no internal locks.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ctxcache/cache_record.h"
#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/retention.h"

namespace ctxcache {

class BaseBlockIndex;

class CacheRecordStore {
public:
    // hashSource: where the hashes of records with a base path are derived from (it must outlive the store);
    // null keeps every record's hashes.
    explicit CacheRecordStore(int32_t maxRecords, BaseBlockIndex const* hashSource = nullptr);
    CacheRecordStore(CacheRecordStore const&) = delete;
    CacheRecordStore& operator=(CacheRecordStore const&) = delete;
    CacheRecordStore(CacheRecordStore&&) = delete;
    CacheRecordStore& operator=(CacheRecordStore&&) = delete;

    // Assigns the next id and inserts as the most recent of its priority bucket. An exact duplicate (same hybrid
    // key and kind for a hybrid record, same exact key otherwise) is only touched and returned with inserted =
    // false (its priority unchanged). Copies the record's paths (and its hashes only where they cannot be derived).
    RecordInsertResult insert(CacheRecord const& record, int32_t priority = kDefaultRetentionPriority);
    std::optional<RecordId> find(CacheRecordKey const& key) const;
    // A plain hybrid (or pure-recurrent) checkpoint; never an MTP one.
    std::optional<RecordId> findHybrid(HybridCheckpointKey const& key) const;
    // A Hybrid+MTP checkpoint; never a plain one.
    std::optional<RecordId> findHybridMtp(HybridCheckpointKey const& key) const;
    // Every stored hybrid exact length (plain and MTP) below inputTokenCount, longest first, without duplicates.
    std::vector<int32_t> hybridCandidateLengths(int32_t inputTokenCount) const;
    // Only the lengths whose checkpoint's full blocks are a prefix of `inputFullBlockHashes` as far as its last
    // full block (fb = the record's fullBlockCount: length / pageSize, or (length - 1) / pageSize for an MTP
    // checkpoint; anchored at hash fb-1, or at the chain root for fb = 0), below
    // inputTokenCount, longest first, without duplicates. O(input blocks + lengths returned).
    std::vector<int32_t> hybridCandidateLengths(int32_t inputTokenCount, BlockHashSpan inputFullBlockHashes) const;

    StoredRecord const& get(RecordId id) const;
    // The hash of `record`'s logical block `block` (< key.fullBlockCount): kept, or derived from its base page.
    BlockHash logicalHash(StoredRecord const& record, size_t block) const;
    // Appends the logical hashes of blocks [from, to) to `out`, as logicalHash would, loading the reverse entries
    // ahead of the reads (an eviction's walk over a cold record). Throws as logicalHash; `out` may then hold a
    // prefix of them.
    void appendLogicalHashes(StoredRecord const& record, size_t from, size_t to, std::vector<BlockHash>& out) const;
    // The digest StoredRecord::publishedHashDigest holds for these logical hashes (block positions count).
    static uint64_t hashDigest(BlockHashSpan hashes) noexcept;
    // The full form, with every logical hash (O(blocks)): for readers off the hot path.
    CacheRecord materialize(StoredRecord const& record) const;
    CacheRecord materialize(RecordId id) const { return materialize(get(id)); }
    // True when the store derives this record's hashes (it has a hash source and the record a base path).
    bool derivesHashes(CacheRecordCore const& record) const noexcept {
        return hashSource_ != nullptr && !record.basePagePath.empty();
    }
    bool contains(RecordId id) const noexcept { return records_.find(id) != records_.end(); }
    // Attaches a draft path to a base-only record (as long as its base path) and makes it MRU.
    void setDraftState(RecordId id, std::vector<PageId> draftPagePath);
    void touch(RecordId id);
    // Returns the record as it was stored: its derivable hashes stay readable through logicalHash / materialize
    // only while the source still maps its pages (the manager reads them before it releases the pages).
    StoredRecord erase(RecordId id);
    // Cuts a non-hybrid record down to its first keepBlocks blocks (1 <= keepBlocks < fullBlockCount): logical
    // hashes (kept or derived) and base (and draft) paths shrink, the key becomes {hash of block keepBlocks-1,
    // keepBlocks}, the LRU position stays. Returns what was cut (O(blocks cut)). ContractError, nothing changed, for a
    // hybrid record, a keepBlocks out of range, or a shorter key that another record already has.
    struct TrimmedTail {
        int32_t firstBlock = 0;  // index of the first block cut (= keepBlocks)
        std::vector<PageId> basePages;
        std::vector<PageId> draftPages;  // empty for a base-only record
    };
    TrimmedTail trimTail(RecordId id, int32_t keepBlocks);

    // The eviction order of the listed records: priority buckets ascending (0 first), least recent first within
    // one. With every record at one priority it is plain record LRU. The list is the store's own: valid until the
    // next mutation.
    std::list<RecordId> const& lru() const noexcept { return lru_; }
    // A record's bucket. setPriority moves it to another bucket at its place by recency there (a touch's stamp).
    int32_t priority(RecordId id) const;
    void setPriority(RecordId id, int32_t priority);
    // Unlisted (pinned) records are outside the eviction order (leastRecent and lru() never show them); a touch
    // still renews their recency, and relist puts them back at their place by it.
    void unlist(RecordId id);
    void relist(RecordId id);
    bool isListed(RecordId id) const;
    // Every record: the eviction order (lru()), then the unlisted (pinned) ones, which are never victims.
    std::vector<RecordId> lruToMru() const {
        std::vector<RecordId> ids(lru_.begin(), lru_.end());
        ids.insert(ids.end(), parked_.begin(), parked_.end());
        return ids;
    }
    std::optional<RecordId> leastRecent() const noexcept;
    size_t size() const noexcept { return records_.size(); }
    int32_t maxRecords() const noexcept { return maxRecords_; }
    RecordId nextId() const noexcept { return nextId_; }

    template <class F>
    void forEach(F&& f) const {
        for (auto const& [id, entry] : records_) f(entry.record);  // StoredRecord const&
    }

    void checkInvariants() const;
    size_t memoryBytes() const noexcept;

private:
    struct Entry {
        StoredRecord record;
        std::list<RecordId>::iterator lruPosition;  // in lru_ when listed, else in parked_
        uint64_t stamp = 0;                          // recency: the tick of its insert or last touch
        int32_t priority = kDefaultRetentionPriority;
        bool listed = true;
    };
    // One priority's run of lru_: its first and last record (valid while count > 0).
    struct Bucket {
        std::list<RecordId>::iterator first, last;
        uint32_t count = 0;
    };
    Entry& entry(RecordId id, char const* operation);
    void makeMostRecent(Entry& e);
    std::list<RecordId>::iterator bucketEnd(int32_t priority);
    void leaveBucket(Entry& e) noexcept;  // the node stays where it is; only the bookkeeping forgets it
    void placeBefore(Entry& e, std::list<RecordId>::iterator pos, bool front, bool back) noexcept;
    void placeAtBack(Entry& e) noexcept;
    void placeByRecency(Entry& e);
    uint64_t stampOf(RecordId id) const;
    // Where a hybrid checkpoint hangs off its prompt's block chain: its last full block (or the chain root).
    CacheRecordKey anchorOf(StoredRecord const& record) const;

    int32_t maxRecords_;
    BaseBlockIndex const* hashSource_;
    RecordId nextId_ = 1;
    std::unordered_map<RecordId, Entry> records_;
    detail::FlatHashMap<CacheRecordKey, RecordId, CacheRecordKeyHasher> exactIndex_;
    using CheckpointIndex = detail::FlatHashMap<HybridCheckpointKey, RecordId, HybridCheckpointKeyHasher>;
    CheckpointIndex& checkpointIndex(bool mtp) noexcept { return mtp ? mtpIndex_ : hybridIndex_; }
    CheckpointIndex const& checkpointIndex(bool mtp) const noexcept { return mtp ? mtpIndex_ : hybridIndex_; }

    CheckpointIndex hybridIndex_;
    CheckpointIndex mtpIndex_;
    std::map<int32_t, int32_t, std::greater<int32_t>> hybridLengths_;  // exact length -> record count
    // (hash of the checkpoint's last full block or the chain root, full-block count) -> exact lengths.
    std::unordered_map<CacheRecordKey, std::vector<int32_t>, CacheRecordKeyHasher> hybridAnchors_;
    std::list<RecordId> lru_;
    std::list<RecordId> parked_;  // unlisted records (and a new one while it is inserted)
    std::array<Bucket, kRetentionPriorityCount> buckets_{};
    uint64_t nonEmpty_[2] = {0, 0};  // bit p: bucket p holds a record
    uint64_t tick_ = 0;
};

}  // namespace ctxcache
