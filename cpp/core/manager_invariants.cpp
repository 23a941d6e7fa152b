// ContextCacheManager's verification: checkInvariants() checks every component, then recounts every active and
// cache reference from the live leases and the records and compares them with the pools' counts, the canonical
// base pages with the base index, and the paired boundaries with the draft index; metadataBytes() sums the
// components' memory. Contract: include/ctxcache/context_cache_manager.h. Cost: O(issued ids + records).
// Threading: the manager's (read-only; no writer may run concurrently).
#include "ctxcache/context_cache_manager.h"

#include <cmath>
#include <string>
#include <vector>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"
#include "lease_state.h"

namespace ctxcache {
namespace {

using ctxcache::detail::str;

}  // namespace

void ContextCacheManager::checkInvariants() const {
    pools_.checkInvariants();
    baseIndex_.checkInvariants();
    draftIndex_.checkInvariants();
    records_.checkInvariants();

    // Only the ids handed out so far can be held (the others are free and were never used): the recount is
    // O(issued ids), not O(capacity).
    std::vector<int32_t> active[kResourceTypeCount], cache[kResourceTypeCount];
    for (ResourceType type : kAllResourceTypes) {
        active[static_cast<int>(type)].assign(static_cast<size_t>(pools_.issuedCount(type)), 0);
        cache[static_cast<int>(type)].assign(static_cast<size_t>(pools_.issuedCount(type)), 0);
    }
    auto count = [&](std::vector<int32_t>* table, ResourceId const& id, std::string const& holder) {
        if (!pools_.validId(id))
            throw InvariantError(holder + " holds " + toString(id.type) + " " + str(id.index) +
                                 ", which is out of range");
        if (id.index >= pools_.issuedCount(id.type))
            throw InvariantError(holder + " holds " + toString(id.type) + " " + str(id.index) +
                                 ", which was never allocated");
        ++table[static_cast<int>(id.type)][static_cast<size_t>(id.index)];
    };

    size_t leases = 0;
    for (LeaseState const* s = leaseList_; s; s = s->next) {
        ++leases;
        if (s->manager != this) throw InvariantError("a live lease names another manager");
        std::string const holder = "a live lease";
        for (PageId page : s->basePages) count(active, {ResourceType::kBaseKvPage, page}, holder);
        for (PageId page : s->draftPages) count(active, {ResourceType::kDraftKvPage, page}, holder);
        if (s->recurrentBinding) count(active, {ResourceType::kRecurrentSnapshot, *s->recurrentBinding}, holder);
        if (s->partialBinding) count(active, {ResourceType::kPartialKvSnapshot, *s->partialBinding}, holder);
        for (ResourceId const& id : s->reservedSnapshots) count(active, id, holder);
        if (!isDraftLease(s->mode) && !s->draftPages.empty())
            throw InvariantError("a lease that is neither spec nor Hybrid+MTP holds draft pages");
    }
    if (leases != liveLeases_)
        throw InvariantError("live lease count " + str(static_cast<int64_t>(liveLeases_)) +
                             " != " + str(static_cast<int64_t>(leases)));

    // Pins hold like leases: one active ref per resource of each pinned record.
    size_t pinned = 0;
    retention_.forEachPin([&](RecordId id, int64_t) {
        ++pinned;
        if (!records_.contains(id))
            throw InvariantError("pinned record " + str(static_cast<int64_t>(id)) + " does not exist");
        if (records_.isListed(id))
            throw InvariantError("pinned record " + str(static_cast<int64_t>(id)) + " is in the eviction order");
        std::string const holder = "the pin of record " + str(static_cast<int64_t>(id));
        for (ResourceId const& rid : records_.get(id).resources()) {
            count(active, rid, holder);
            if (retention_.pinHolders(rid) <= 0)
                throw InvariantError(holder + " is not counted on " + toString(rid.type) + " " + str(rid.index));
        }
    });
    if (maxRecords_ > 0 && pinned > 0 && pinned >= static_cast<size_t>(maxRecords_))
        throw InvariantError(str(static_cast<int64_t>(pinned)) + " pinned records leave no slot below maxRecords " +
                             str(maxRecords_));
    for (ResourceType type : kAllResourceTypes)
        if (retention_.pinnedCount(type) > static_cast<int32_t>(std::floor(pinBudget_ * pools_.capacity(type))))
            throw InvariantError(std::string("pins hold ") + str(retention_.pinnedCount(type)) + " " + toString(type) +
                                 " ids, beyond the budget");

    size_t pairedBoundaries = 0;
    records_.forEach([&](StoredRecord const& stored) {
        // Retention: unpinned records are listed, and every record sits in the bucket its ranges give it at the
        // ranking time (all expiries up to it applied).
        if (!retention_.isPinned(stored.id) && !records_.isListed(stored.id))
            throw InvariantError("record " + str(static_cast<int64_t>(stored.id)) + " is unlisted but not pinned");
        if (records_.priority(stored.id) != rankOf(stored, rankedAtNs_))
            throw InvariantError("record " + str(static_cast<int64_t>(stored.id)) + " is in priority bucket " +
                                 str(records_.priority(stored.id)) + ", its retention ranks it " +
                                 str(rankOf(stored, rankedAtNs_)));
        if (RetentionBlockRanges const* ranges = retention_.find(stored.id))
            for (RetentionBlockRange const& r : *ranges)
                if (r.firstBlock < 0 || r.firstBlock >= r.endBlock || r.endBlock > stored.key.fullBlockCount ||
                    r.priority < kMinRetentionPriority || r.priority > kMaxRetentionPriority ||
                    (r.expiresAtNs != kRetentionNever && r.expiresAtNs > rankedAtNs_ &&
                     retention_.nextDue() > r.expiresAtNs))
                    throw InvariantError("record " + str(static_cast<int64_t>(stored.id)) +
                                         " has a retention range outside its blocks, its priorities or its schedule");
        // Derived hashes come from the base index; each must map back to the very page it came from.
        CacheRecord const record = records_.materialize(stored);
        std::string const holder = "record " + str(static_cast<int64_t>(record.id));
        for (ResourceId const& id : record.resources()) count(cache, id, holder);
        for (size_t i = 0; i < record.basePagePath.size(); ++i) {
            std::optional<PageId> mapped = baseIndex_.lookup(record.logicalBlockHashes[i]);
            if (!mapped || *mapped != record.basePagePath[i])
                throw InvariantError(holder + " base page " + str(record.basePagePath[i]) + " at block " +
                                     str(static_cast<int64_t>(i)) + " is not the canonical page of its hash");
        }
        if (record.hasEagleDraftPath()) {
            pairedBoundaries += record.logicalBlockHashes.size();
            for (size_t i = 0; i < record.logicalBlockHashes.size(); ++i)
                if (!draftIndex_.contains(record.basePagePath[i], {record.id, static_cast<int32_t>(i + 1)}))
                    throw InvariantError(holder + " boundary " + str(static_cast<int64_t>(i + 1)) +
                                         " is missing from the draft index");
        }
    });
    if (draftIndex_.entryCount() != pairedBoundaries)
        throw InvariantError("draft index holds " + str(static_cast<int64_t>(draftIndex_.entryCount())) +
                             " entries for " + str(static_cast<int64_t>(pairedBoundaries)) + " paired boundaries");

    for (ResourceType type : kAllResourceTypes) {
        int const t = static_cast<int>(type);
        for (int32_t index = 0; index < pools_.issuedCount(type); ++index) {
            ResourceId const id{type, index};
            if (pools_.activeRefCount(id) != active[t][static_cast<size_t>(index)])
                throw InvariantError(std::string(toString(type)) + " " + str(index) + " has " +
                                     str(pools_.activeRefCount(id)) + " active refs but leases hold " +
                                     str(active[t][static_cast<size_t>(index)]));
            if (pools_.cacheRefCount(id) != cache[t][static_cast<size_t>(index)])
                throw InvariantError(std::string(toString(type)) + " " + str(index) + " has " +
                                     str(pools_.cacheRefCount(id)) + " cache refs but records list it " +
                                     str(cache[t][static_cast<size_t>(index)]) + " times");
            if (type == ResourceType::kBaseKvPage) {
                bool const mapped = baseIndex_.hashOfPage(index).has_value();
                if (mapped != (cache[t][static_cast<size_t>(index)] > 0))
                    throw InvariantError("base page " + str(index) +
                                         (mapped ? " is indexed without a cache ref" : " is cached but not indexed"));
            }
        }
    }
    baseIndex_.forEach([&](BlockHash const&, PageId page) {
        if (page >= pools_.issuedCount(ResourceType::kBaseKvPage))
            throw InvariantError("base page " + str(page) + " is indexed but was never allocated");
    });
    if (maxRecords_ == 0 ? records_.size() != 0 : records_.size() > static_cast<size_t>(maxRecords_))
        throw InvariantError("record count " + str(static_cast<int64_t>(records_.size())) + " exceeds maxRecords " +
                             str(maxRecords_));
}

size_t ContextCacheManager::metadataBytes() const noexcept {
    return sizeof(*this) + pools_.memoryBytes() + baseIndex_.memoryBytes() + draftIndex_.memoryBytes() +
           records_.memoryBytes() + retention_.memoryBytes();
}

}  // namespace ctxcache
