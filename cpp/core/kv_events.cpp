// KvEventLog: flat append-only event storage; a publication's identity (KvEventKeys, KvEventIdentity) and the
// per-block extra keys derived from it; media identifiers (include/ctxcache/kv_events.h).

#include "ctxcache/kv_events.h"

#include <openssl/sha.h>

#include <algorithm>
#include <utility>

#include "ctxcache/detail/contract_scope.h"

namespace ctxcache {
namespace {

using detail::str;
constexpr detail::ContractScope contract{""};

// Room for `extra` more elements, growing geometrically (reserve(size + extra) alone would reallocate on every
// append once the capacity is reached).
template <class T>
void makeRoom(std::vector<T>& v, size_t extra) {
    size_t const needed = v.size() + extra;
    if (needed > v.capacity()) v.reserve(std::max(needed, 2 * v.capacity()));
}

}  // namespace

KvEvent KvEventLog::header(KvEventType type, bool hasParent, uint64_t parentBlockHash, size_t count,
                           size_t tokenCount) const noexcept {
    KvEvent event;
    event.type = type;
    event.hasParent = hasParent;
    event.parentBlockHash = hasParent ? parentBlockHash : 0;
    event.firstHash = hashes_.size();
    event.hashCount = count;
    event.firstToken = tokens_.size();
    event.tokenCount = tokenCount;
    return event;
}

void KvEventLog::reserveFor(size_t count, size_t tokenCount, size_t chars, size_t keys) {
    makeRoom(events_, 1);
    makeRoom(hashes_, count);
    makeRoom(tokens_, tokenCount);
    if (text_.size() + chars > text_.capacity()) text_.reserve(std::max(text_.size() + chars, 2 * text_.capacity()));
    makeRoom(extraKeys_, keys);
}

void KvEventLog::appendStored(BlockHash const* blockHashes, size_t count, bool hasParent, uint64_t parentBlockHash,
                              int32_t const* tokens, size_t tokenCount, KvEventKeys const& keys, int64_t firstPosition,
                              KvEventMedium medium) {
    KvEvent event = header(KvEventType::kBlockStored, hasParent, parentBlockHash, count, tokenCount);
    event.medium = medium;
    int64_t const page = blockSize;
    int64_t const end = firstPosition + static_cast<int64_t>(count) * page;
    // The media items that overlap [firstPosition, end): sorted and disjoint, so they are one run [m0, m1).
    size_t m0 = page > 0 ? 0 : keys.mediaCount;  // a log without a block size places no media
    while (m0 < keys.mediaCount && keys.media[m0].firstToken + keys.media[m0].tokenCount <= firstPosition) ++m0;
    size_t m1 = m0;
    while (m1 < keys.mediaCount && keys.media[m1].firstToken < end) ++m1;
    // Room first: the adapter's name once, each overlapping identifier once; a key per block for the adapter and
    // per (block, item) overlap (an item spans at most ceil(tokens / page) + 1 blocks).
    size_t chars = keys.loraName.size();
    size_t keyCount = keys.loraName.empty() ? 0 : count;
    for (size_t m = m0; m < m1; ++m) {
        KvEventMedia const& item = keys.media[m];
        chars += item.identifier.size();
        int64_t const from = std::max(item.firstToken, firstPosition);
        int64_t const to = std::min(item.firstToken + item.tokenCount, end);
        keyCount += static_cast<size_t>((to - 1 - firstPosition) / page - (from - firstPosition) / page + 1);
    }
    reserveFor(count, tokenCount, chars, keyCount);
    // Nothing below allocates: the log is unchanged if a reservation throws.
    for (size_t i = 0; i < count; ++i) hashes_.push_back(kvEventBlockHash(blockHashes[i]));
    tokens_.insert(tokens_.end(), tokens, tokens + tokenCount);
    if (keyCount > 0 || !keys.loraName.empty()) {
        event.firstLoraChar = text_.size();
        event.loraCharCount = keys.loraName.size();
        text_.append(keys.loraName);
        size_t const mediaText = text_.size();
        for (size_t m = m0; m < m1; ++m) text_.append(keys.media[m].identifier);
        event.firstExtraKey = extraKeys_.size();
        size_t m = m0;        // the first item that may overlap the current block
        size_t at = mediaText;  // its identifier's first character
        for (size_t b = 0; b < count; ++b) {
            int64_t const blockStart = firstPosition + static_cast<int64_t>(b) * page;
            int64_t const blockEnd = blockStart + page;
            if (!keys.loraName.empty())
                extraKeys_.push_back({static_cast<uint32_t>(b), KvEventExtraKeyKind::kLoraName, event.firstLoraChar,
                                      event.loraCharCount, 0});
            while (m < m1 && keys.media[m].firstToken + keys.media[m].tokenCount <= blockStart) {
                at += keys.media[m].identifier.size();
                ++m;
            }
            size_t charAt = at;
            for (size_t k = m; k < m1 && keys.media[k].firstToken < blockEnd; ++k) {
                KvEventMedia const& item = keys.media[k];
                extraKeys_.push_back({static_cast<uint32_t>(b), KvEventExtraKeyKind::kMedia, charAt,
                                      item.identifier.size(), item.firstToken - blockStart});
                charAt += item.identifier.size();
            }
        }
        event.extraKeyCount = extraKeys_.size() - event.firstExtraKey;
    }
    events_.push_back(event);
}

void KvEventLog::beginRemoved(size_t capacity, KvEventMedium medium) {
    makeRoom(events_, 1);
    makeRoom(hashes_, capacity);
    KvEvent event;
    event.type = KvEventType::kBlockRemoved;
    event.medium = medium;
    event.firstHash = hashes_.size();
    event.firstToken = tokens_.size();
    events_.push_back(event);
}

void KvEventLog::endRemoved() noexcept {
    if (events_.empty() || events_.back().type != KvEventType::kBlockRemoved) return;
    KvEvent const& event = events_.back();
    if (event.hashCount == 0) {
        events_.pop_back();
        return;
    }
    auto const first = hashes_.begin() + static_cast<std::ptrdiff_t>(event.firstHash);
    std::reverse(first, first + static_cast<std::ptrdiff_t>(event.hashCount));
}

void KvEventLog::appendCleared() {
    KvEvent event;
    event.type = KvEventType::kAllBlocksCleared;
    event.firstHash = hashes_.size();
    event.firstToken = tokens_.size();
    events_.push_back(event);
}

void KvEventLog::appendEvent(KvEventType type, bool hasParent, uint64_t parentBlockHash, uint64_t const* blockHashes,
                             size_t count, int32_t const* tokens, size_t tokenCount, std::string_view loraName,
                             KvEventExtraKeyValue const* extraKeys, size_t extraKeyCount, KvEventMedium medium) {
    KvEvent event = header(type, hasParent, parentBlockHash, count, tokenCount);
    event.medium = medium;
    size_t chars = loraName.size();
    for (size_t k = 0; k < extraKeyCount; ++k) chars += extraKeys[k].text.size();
    reserveFor(count, tokenCount, chars, extraKeyCount);
    hashes_.insert(hashes_.end(), blockHashes, blockHashes + count);
    tokens_.insert(tokens_.end(), tokens, tokens + tokenCount);
    event.firstLoraChar = text_.size();
    event.loraCharCount = loraName.size();
    text_.append(loraName);
    event.firstExtraKey = extraKeys_.size();
    event.extraKeyCount = extraKeyCount;
    for (size_t k = 0; k < extraKeyCount; ++k) {
        KvEventExtraKeyValue const& v = extraKeys[k];
        extraKeys_.push_back({v.block, v.kind, text_.size(), v.text.size(), v.offset});
        text_.append(v.text);
    }
    events_.push_back(event);
}

void KvEventLog::append(KvEventLog const& other) {
    size_t const hashBase = hashes_.size();
    size_t const tokenBase = tokens_.size();
    size_t const textBase = text_.size();
    size_t const keyBase = extraKeys_.size();
    makeRoom(events_, other.events_.size());
    hashes_.insert(hashes_.end(), other.hashes_.begin(), other.hashes_.end());
    tokens_.insert(tokens_.end(), other.tokens_.begin(), other.tokens_.end());
    text_.append(other.text_);
    for (KvEventExtraKey key : other.extraKeys_) {
        key.firstChar += textBase;
        extraKeys_.push_back(key);
    }
    for (KvEvent event : other.events_) {
        event.firstHash += hashBase;
        event.firstToken += tokenBase;
        event.firstLoraChar += textBase;
        event.firstExtraKey += keyBase;
        events_.push_back(event);
    }
    if (blockSize == 0) blockSize = other.blockSize;
}

KvEventIdentity::KvEventIdentity(std::string loraName, std::vector<Media> media)
    : loraName_(std::move(loraName)), media_(std::move(media)) {
    views_.reserve(media_.size());
    for (Media const& m : media_) views_.push_back({m.identifier, m.firstToken, m.tokenCount});
    checkKvEventKeys("KvEventIdentity", keys());
}

void checkKvEventKeys(char const* operation, KvEventKeys const& keys) {
    if (keys.mediaCount > 0 && !keys.media) contract(operation, "eventKeys.media is null");
    int64_t previousEnd = 0;
    for (size_t m = 0; m < keys.mediaCount; ++m) {
        KvEventMedia const& item = keys.media[m];
        std::string const where = "eventKeys.media[" + str(static_cast<int64_t>(m)) + "]";
        if (item.identifier.empty()) contract(operation, where + " has no identifier");
        if (item.firstToken < 0) contract(operation, where + " starts at a negative position " + str(item.firstToken));
        if (item.tokenCount <= 0) contract(operation, where + " covers no tokens (" + str(item.tokenCount) + ")");
        if (item.tokenCount > INT64_MAX - item.firstToken) contract(operation, where + " ends beyond int64");
        if (m > 0 && item.firstToken < previousEnd)
            contract(operation, where + " starts at " + str(item.firstToken) + ", before the previous item's end " +
                                    str(previousEnd) + " (items are sorted by position and do not overlap)");
        previousEnd = item.firstToken + item.tokenCount;
    }
}

std::string mediaEventIdentifier(Hash128 const& identity) {
    unsigned char bytes[16];
    for (int i = 0; i < 8; ++i) {
        bytes[i] = static_cast<unsigned char>(identity.lo >> (8 * i));
        bytes[8 + i] = static_cast<unsigned char>(identity.hi >> (8 * i));
    }
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(bytes, sizeof bytes, digest);
    // The digest's 32 bytes in order, written by toHex as two 128-bit values read big-endian.
    auto word = [&](int first) {
        uint64_t w = 0;
        for (int i = 0; i < 8; ++i) w = (w << 8) | digest[first + i];
        return w;
    };
    return toHex(Hash128{word(0), word(8)}) + toHex(Hash128{word(16), word(24)});
}

}  // namespace ctxcache
