// CacheRecord: one publication endpoint. A vanilla record owns a complete base path (one canonical page per
// logical block); an EAGLE-paired record also owns an equally long draft path; a hybrid checkpoint record owns
// an exact-length recurrent snapshot, a partial-KV snapshot when the length is mid-page on an attention model,
// and (with attention) the floor(length / pageSize) base pages before it. A pure-recurrent record has no pages.
// A Hybrid+MTP checkpoint (hybridMtpCheckpoint) at exact length E keeps the boundary token private: it owns
// fb = floor((E-1) / pageSize) base pages AND fb draft pages (the pages complete in both pools), the recurrent
// slot, and always the partial-KV slot (base tokens [fb*P, E) and the draft tokens of page fb). It lives in the
// store's MTP checkpoint index, apart from plain hybrid checkpoints, and never in the EAGLE draft path index.
//
// Invariants (checked by validate()): logicalBlockHashes.size() == key.fullBlockCount; a non-hybrid record has
// >= 1 block and key.terminalHash == the last logical hash; a hybrid record has exactCheckpointLength > 0, a
// recurrent slot and key.terminalHash = its exact-prefix digest; basePagePath is empty (pure recurrent) or as
// long as the logical path; draftPagePath is empty or as long as basePagePath, and a hybrid record has one only
// when it is an MTP checkpoint; an MTP checkpoint is hybrid, has a partial-KV slot, base and draft paths as long
// as its logical path, and fullBlockCount < exactCheckpointLength when it has full blocks (fb <= E-1); no
// negative id. (fb == floor((E-1)/P) needs the page size: the manager checks it at publication.)
// The manager gives every listed resource exactly one cache reference per listing.
// Two forms: CacheRecord carries every logical hash (publication input, materialized reads); StoredRecord is what
// the store keeps, without the hashes it can derive from the base path (a record's base pages are canonical).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/types.h"

namespace ctxcache {

struct CacheRecordKey {
    BlockHash terminalHash;
    int32_t fullBlockCount = 0;

    friend bool operator==(CacheRecordKey const& a, CacheRecordKey const& b) noexcept {
        return a.terminalHash == b.terminalHash && a.fullBlockCount == b.fullBlockCount;
    }
    friend bool operator!=(CacheRecordKey const& a, CacheRecordKey const& b) noexcept { return !(a == b); }
};

struct HybridCheckpointKey {
    BlockHash exactPrefixDigest;
    int32_t exactLength = 0;

    friend bool operator==(HybridCheckpointKey const& a, HybridCheckpointKey const& b) noexcept {
        return a.exactPrefixDigest == b.exactPrefixDigest && a.exactLength == b.exactLength;
    }
    friend bool operator!=(HybridCheckpointKey const& a, HybridCheckpointKey const& b) noexcept { return !(a == b); }
};

// What every form of a record holds: its id, key, page paths, snapshot slots and kind.
struct CacheRecordCore {
    RecordId id = kNoRecord;
    CacheRecordKey key;
    std::vector<PageId> basePagePath;
    std::vector<PageId> draftPagePath;
    std::optional<int32_t> recurrentSnapshotSlot;
    std::optional<int32_t> partialKvSnapshotSlot;
    std::optional<int32_t> exactCheckpointLength;
    bool hybridMtpCheckpoint = false;  // a Hybrid+MTP checkpoint (see the file comment); implies isHybrid()

    // Every resource this record holds one cache reference on: base pages, draft pages, recurrent, partial.
    std::vector<ResourceId> resources() const;
    // f(ResourceId) for each of resources(), in that order, without building the list (the publish path).
    template <class F>
    void forEachResource(F&& f) const {
        for (PageId page : basePagePath) f(ResourceId{ResourceType::kBaseKvPage, page});
        for (PageId page : draftPagePath) f(ResourceId{ResourceType::kDraftKvPage, page});
        if (recurrentSnapshotSlot) f(ResourceId{ResourceType::kRecurrentSnapshot, *recurrentSnapshotSlot});
        if (partialKvSnapshotSlot) f(ResourceId{ResourceType::kPartialKvSnapshot, *partialKvSnapshotSlot});
    }
    std::optional<HybridCheckpointKey> hybridKey() const;
    bool isHybrid() const noexcept { return exactCheckpointLength.has_value(); }
    bool isHybridMtp() const noexcept { return hybridMtpCheckpoint && isHybrid(); }
    bool hasDraftPath() const noexcept { return !draftPagePath.empty(); }
    // An EAGLE record: a draft path and no checkpoint (an MTP checkpoint's draft path stays out of the draft
    // index); the draft index holds one entry per boundary of exactly these records.
    bool hasEagleDraftPath() const noexcept { return hasDraftPath() && !isHybrid(); }
};

// The full form: what a publication inserts and what CacheRecordStore::materialize returns.
struct CacheRecord : CacheRecordCore {
    std::vector<BlockHash> logicalBlockHashes;

    // Throws ContractError naming the first broken rule (see the file comment).
    void validate() const;
};

// The form CacheRecordStore keeps: the logical hashes only where the store cannot derive them. A store with a
// hash source (the manager's BaseBlockIndex) derives block i's hash of a record with a base path from its
// canonical page (the index's page -> hash reverse entry, which exists while the record holds the page), so
// keptBlockHashes is empty there; it keeps them for a pure-recurrent checkpoint (no pages), and for every
// record in a store without a hash source. Read hashes through CacheRecordStore::logicalHash / materialize.
// publishedHashDigest is a 64-bit digest of the logical hashes the record was inserted with (kept in step by a
// trim), so that CacheRecordStore::checkInvariants can prove the derived hashes are still the published ones.
struct StoredRecord : CacheRecordCore {
    std::vector<BlockHash> keptBlockHashes;
    uint64_t publishedHashDigest = 0;
};

struct RecordInsertResult {
    RecordId id = kNoRecord;
    bool inserted = false;
};

struct CacheRecordKeyHasher {
    size_t operator()(CacheRecordKey const& k) const noexcept {
        return Hash128Hasher{}(k.terminalHash) ^ (static_cast<size_t>(static_cast<uint32_t>(k.fullBlockCount)) << 1);
    }
};
struct HybridCheckpointKeyHasher {
    size_t operator()(HybridCheckpointKey const& k) const noexcept {
        return Hash128Hasher{}(k.exactPrefixDigest) ^ (static_cast<size_t>(static_cast<uint32_t>(k.exactLength)) << 1);
    }
};

}  // namespace ctxcache
