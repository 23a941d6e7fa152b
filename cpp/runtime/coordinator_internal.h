// What the four files of ContextCacheCoordinator share (context_cache_coordinator.cpp: construction and
// lifetime; coordinator_admission.cpp; coordinator_prefill.cpp: prefill and publication; coordinator_decode.cpp:
// decode and compaction): the request-state layout (request_state.h), the ContractError thrower, the phase check,
// the prefill-advance check and the hash-chain helpers. Internal to cpp/runtime; none of it is API.
// Threading: the coordinator's single-writer contract; the helpers keep no state of their own.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"
#include "request_state.h"

namespace ctxcache::runtime {

using Phase = ContextCacheCoordinator::RequestState::Phase;
using Status = ContextCacheCoordinatorStatus;

using ctxcache::detail::str;
inline constexpr ctxcache::detail::ContractScope contract{"ContextCacheCoordinator"};

inline int32_t ceilDiv(int64_t a, int32_t b) { return static_cast<int32_t>((a + b - 1) / b); }

// ContractError "op: not allowed while the request is <phase>" unless the request is in one of `ok`.
void requirePhase(char const* op, ContextCacheCoordinator::RequestState const& s, std::initializer_list<Phase> ok);

// Validates a prefill advance (throws) for a sequence whose committed length must become its input length.
void checkPrefillAdvance(char const* op, DecodingTokenStateContract contract_, SequenceState const& seq,
                         ContextCacheSequenceAdvance const& a, std::string const& where);

// Extend the full-block hash chain over the first `length` tokens.
inline void extendHashes(SequenceState& s, BlockHasher const& hasher, int32_t pageSize, int32_t length) {
    size_t const want = static_cast<size_t>(length / pageSize);
    while (s.hashes.size() < want) {
        size_t const b = s.hashes.size();
        BlockHash const parent = b == 0 ? kChainRoot : s.hashes[b - 1];
        size_t const begin = b * static_cast<size_t>(pageSize);
        Hash128 const* media = s.media.empty() ? nullptr : s.media.data() + begin;
        s.hashes.push_back(
            hasher.hashBlock(parent, s.tokens.data() + begin, static_cast<size_t>(pageSize), s.extras, media));
    }
}

inline BlockHash exactDigest(SequenceState& s, BlockHasher const& hasher, int32_t pageSize, int32_t length) {
    extendHashes(s, hasher, pageSize, length);
    int32_t const full = length / pageSize;
    BlockHash const parent = full == 0 ? kChainRoot : s.hashes[static_cast<size_t>(full - 1)];
    int32_t const tail = length % pageSize;
    if (tail == 0) return parent;
    size_t const begin = static_cast<size_t>(full) * static_cast<size_t>(pageSize);
    Hash128 const* media = s.media.empty() ? nullptr : s.media.data() + begin;
    return hasher.hashBlock(parent, s.tokens.data() + begin, static_cast<size_t>(tail), s.extras, media);
}

inline void appendTokens(SequenceState& s, int32_t const* tokens, int32_t count) {
    s.tokens.insert(s.tokens.end(), tokens, tokens + count);
    if (!s.media.empty()) s.media.resize(s.tokens.size(), Hash128{});
}

}  // namespace ctxcache::runtime
