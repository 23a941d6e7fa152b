// encodeKvEventBatch: one batch of KV events as vLLM's msgpack payload, written with msgpack-cxx's packer
// (include/ctxcache/events/kv_event_publisher.h; field names and order: docs/EVENTS.md).
//
//   batch    [ts: float64, events: [...], data_parallel_rank: int | nil]
//   map      {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64 | nil,
//             "token_ids": [int...], "block_size": int, "lora_id": nil, "medium": str, "lora_name": str | nil,
//             "extra_keys": [nil | [str | [str, int]...]...]}   (extra_keys only when a block has any: vLLM's
//             default is nil; one entry per listed block, the LoRA name, then (media identifier, offset) pairs)
//            {"type": "BlockRemoved", "block_hashes": [u64...], "medium": str}
//            {"type": "AllBlocksCleared"}
//   array    the same values in the same order, the tag first: ["BlockStored", hashes, parent, tokens, ...]

#include "ctxcache/events/kv_event_publisher.h"

#include "kv_event_encoding.h"

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER
#include <msgpack.hpp>
#endif

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ctxcache {

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER
namespace {

// msgpack-cxx writes through any buffer with write(data, size). This one fills a reused string with an inline
// memcpy (std::string::append is an out-of-line call per written integer: it tripled the cost of a token); the
// string is cut to the written size at the end.
struct StringBuffer {
    std::string& out;
    size_t used = 0;
    void write(char const* data, size_t size) {
        if (used + size > out.size()) out.resize(std::max(2 * out.size(), used + size + 4096));
        std::memcpy(&out[used], data, size);
        used += size;
    }
};
using Packer = msgpack::packer<StringBuffer>;

void packString(Packer& pk, std::string_view text) {
    pk.pack_str(static_cast<uint32_t>(text.size()));
    pk.pack_str_body(text.data(), static_cast<uint32_t>(text.size()));
}

// A map key (map encoding) or nothing (array encoding: position is the key).
void key(Packer& pk, bool map, char const* name) {
    if (map) packString(pk, name);
}

// An event of `fields` fields (its "type" included): a map, or a positional array.
void openEvent(Packer& pk, bool map, uint32_t fields) {
    if (map) pk.pack_map(fields);
    else pk.pack_array(fields);
}

void packHashes(Packer& pk, KvEventLog const& log, KvEvent const& e) {
    pk.pack_array(static_cast<uint32_t>(e.hashCount));
    for (size_t i = 0; i < e.hashCount; ++i) pk.pack_uint64(log.hashes()[e.firstHash + i]);
}

// One entry per listed block: nil, or its keys (a LoRA name as a string, a media item as [identifier, offset]).
void packExtraKeys(Packer& pk, KvEventLog const& log, KvEvent const& e) {
    KvEventExtraKey const* key = log.extraKeys().data() + e.firstExtraKey;
    KvEventExtraKey const* const end = key + e.extraKeyCount;
    pk.pack_array(static_cast<uint32_t>(e.hashCount));
    for (size_t b = 0; b < e.hashCount; ++b) {
        KvEventExtraKey const* const first = key;
        while (key != end && key->block == b) ++key;
        if (key == first) {
            pk.pack_nil();
            continue;
        }
        pk.pack_array(static_cast<uint32_t>(key - first));
        for (KvEventExtraKey const* k = first; k != key; ++k) {
            if (k->kind == KvEventExtraKeyKind::kMedia) {
                pk.pack_array(2);
                packString(pk, log.text(*k));
                pk.pack_int64(k->offset);
            } else {
                packString(pk, log.text(*k));
            }
        }
    }
}

std::string const kHostMedium = "CPU";

void packEvent(Packer& pk, KvEventLog const& log, KvEvent const& e, std::string const& deviceMedium, bool map) {
    // The manager's own events carry the publisher's medium; a host tier's say CPU.
    std::string const& medium = e.medium == KvEventMedium::kHost ? kHostMedium : deviceMedium;
    switch (e.type) {
        case KvEventType::kBlockStored:
            openEvent(pk, map, e.extraKeyCount > 0 ? 9 : 8);
            key(pk, map, "type");
            packString(pk, "BlockStored");
            key(pk, map, "block_hashes");
            packHashes(pk, log, e);
            key(pk, map, "parent_block_hash");
            if (e.hasParent) pk.pack_uint64(e.parentBlockHash);
            else pk.pack_nil();
            key(pk, map, "token_ids");
            pk.pack_array(static_cast<uint32_t>(e.tokenCount));
            for (size_t i = 0; i < e.tokenCount; ++i) pk.pack_int32(log.tokens()[e.firstToken + i]);
            key(pk, map, "block_size");
            pk.pack_int32(log.blockSize);
            key(pk, map, "lora_id");
            pk.pack_nil();
            key(pk, map, "medium");
            packString(pk, medium);
            key(pk, map, "lora_name");
            if (e.loraCharCount > 0) packString(pk, log.loraName(e));
            else pk.pack_nil();
            if (e.extraKeyCount > 0) {
                key(pk, map, "extra_keys");
                packExtraKeys(pk, log, e);
            }
            return;
        case KvEventType::kBlockRemoved:
            openEvent(pk, map, 3);
            key(pk, map, "type");
            packString(pk, "BlockRemoved");
            key(pk, map, "block_hashes");
            packHashes(pk, log, e);
            key(pk, map, "medium");
            packString(pk, medium);
            return;
        case KvEventType::kAllBlocksCleared:
            openEvent(pk, map, 1);
            key(pk, map, "type");
            packString(pk, "AllBlocksCleared");
            return;
    }
}

}  // namespace

void encodeKvEventBatchInto(KvEventLog const& events, double timestamp, std::optional<int32_t> dataParallelRank,
                            std::string const& medium, bool arrayEncoding, std::string& out) {
    StringBuffer buffer{out};
    Packer pk(buffer);
    pk.pack_array(3);
    pk.pack_double(timestamp);
    pk.pack_array(static_cast<uint32_t>(events.size()));
    for (KvEvent const& e : events.events()) packEvent(pk, events, e, medium, !arrayEncoding);
    if (dataParallelRank) pk.pack_int32(*dataParallelRank);
    else pk.pack_nil();
    out.resize(buffer.used);
}

std::string encodeKvEventBatch(KvEventLog const& events, double timestamp, std::optional<int32_t> dataParallelRank,
                               std::string const& medium, bool arrayEncoding) {
    std::string out;
    encodeKvEventBatchInto(events, timestamp, dataParallelRank, medium, arrayEncoding, out);
    return out;
}

#else

std::string encodeKvEventBatch(KvEventLog const&, double, std::optional<int32_t>, std::string const&, bool) {
    throw KvEventPublisherUnavailableError(
        "encodeKvEventBatch: this ctxcache was built without msgpack-cxx and libzmq (the KV event publisher); "
        "drain the events instead");
}

#endif

}  // namespace ctxcache
