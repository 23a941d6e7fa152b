// Runtime types: the small, engine-neutral vocabulary the runtime layer (coordinator, request adapter, facade)
// speaks in place of an inference engine's own request, context and tensor types (reference (b)
// "Runtime-side (0.11)").
//
//   TensorView               a pointer, a dtype, a shape and where the bytes live; never owns them.
//   StreamHandle             an opaque stream (a cudaStream_t on CUDA), null on the CPU backend.
//   GenerationRequest        per sequence: prompt token ids, LoRA name, media items (bytes + token positions),
//                            retention (which of its tokens to keep how long: ctxcache/retention.h).
//   DecodingInferenceContext the engine's live batch: token histories, generated counts, terminal reasons,
//                            resident refs; the adapter turns it into coordinator advances.
//   ResidentRef              a fixed resident slot (page-table row, recurrent-state row) and its epoch; epoch 0 is
//                            invalid, and a slot's epoch must grow every time it is handed out again.
//   DecodingKvHeadroom       KV positions one decoder execution may address beyond its materialized endpoint.
//   DecodingTokenStateContract / ContextCacheCommitPolicy   as in the reference.
// Threading: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/retention.h"
#include "ctxcache/reuse_plan.h"

namespace ctxcache::runtime {

using CacheSlot = int32_t;
using StreamHandle = void*;

// Element type of a TensorView. The first four values equal device::DType (and CTXC_DTYPE_*).
enum class ScalarType : uint8_t { kFp16 = 0, kBf16 = 1, kFp8E4m3 = 2, kFp32 = 3, kInt32 = 4, kInt64 = 5, kUInt8 = 6 };
size_t scalarSize(ScalarType type) noexcept;

// Values are part of the C ABI (CTXC_TOKEN_STATE_*).
enum class DecodingTokenStateContract : uint8_t {
    kCommittedPlusLookahead = 0,  // the token list ends with one sampled token whose KV is not written yet
    kFullyCommitted = 1,          // every listed token already has KV
};

// Values are part of the C ABI (CTXC_COMMIT_*).
enum class ContextCacheCommitPolicy : uint8_t {
    kIncludingGeneratedTokens = 0,  // publish at prefill end and at decode end of normally finished sequences
    kPrefillStateOnly = 1,          // publish at prefill end only
};

struct ResidentRef {
    CacheSlot slot = -1;
    uint64_t epoch = 0;  // 0 is invalid
};

struct DecodingKvHeadroom {
    int32_t baseExtraTokens = 1;
    int32_t draftExtraTokens = 0;
};

// A non-owning view of device (or host) bytes. device: -1 = host memory (the CPU backend), else a CUDA ordinal.
struct TensorView {
    void* data = nullptr;
    ScalarType dtype = ScalarType::kFp32;
    std::vector<int64_t> shape;
    int32_t device = -1;

    int64_t elementCount() const noexcept {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
};

// One media item (an image, an audio clip) of a prompt: its bytes and the token positions it occupies,
// [firstToken, firstToken + tokenCount). Its identity in block keys is the hash of the bytes, so the same
// placeholder tokens with other pixels never share KV.
struct MediaItem {
    std::vector<uint8_t> bytes;
    int32_t firstToken = 0;
    int32_t tokenCount = 0;
    uint8_t modality = 0;  // 0 image, 1 audio, 2 video
};

struct SequenceRequest {
    std::vector<int32_t> tokenIds;
    std::string loraName;  // empty = the base model
    std::vector<MediaItem> media;
    std::optional<ContextCacheLookupPolicy> lookupPolicy;  // per-sequence override
    // What every publication of this sequence carries (ranges over its prompt's tokens; tokens generated in decode
    // take decodePriority). The coordinator sets promptTokenCount to the prompt's length itself, so the value
    // given here is ignored. Default: plain LRU.
    RetentionSpec retention;
};

struct GenerationRequest {
    std::vector<SequenceRequest> sequences;
    ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache;
};

// A non-owning view of one row's token history (the engine's own storage, read in place: a step costs nothing
// per token of history). Built from a vector lvalue, which must outlive the context's use; a temporary vector is
// refused at compile time because it would dangle.
struct TokenSpan {
    int32_t const* data = nullptr;
    size_t size = 0;

    TokenSpan() = default;
    TokenSpan(int32_t const* tokens, size_t count) : data(tokens), size(count) {}
    TokenSpan(std::vector<int32_t> const& tokens) : data(tokens.data()), size(tokens.size()) {}  // NOLINT
    TokenSpan(std::vector<int32_t>&&) = delete;

    bool empty() const noexcept { return size == 0; }
    int32_t const& back() const noexcept { return data[size - 1]; }
};

// Values are part of the C ABI (CTXC_SEQUENCE_*).
enum class SequenceStatus : uint8_t {
    kRunning = 0,
    kFinished = 1,   // normal end (end token or length): publishable at decode end
    kCancelled = 2,  // never published at decode end
    kFailed = 3,     // never published at decode end
};

// The engine's live batch, indexed by batch row (0 .. activeBatchSize - 1).
struct DecodingInferenceContext {
    int32_t activeBatchSize = 0;
    std::vector<TokenSpan> tokenIds;  // full history: prompt + generated (+ the lookahead token), not owned
    std::vector<int32_t> rawInputLengths;        // prompt length of each row
    std::vector<int32_t> generatedLengths;       // tokens generated so far (the lookahead token counts)
    std::vector<SequenceStatus> status;
    std::vector<ResidentRef> residentRefs;
};

}  // namespace ctxcache::runtime
