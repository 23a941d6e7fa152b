// Batched copies of KV pages between a KvPagePool and slots of host memory (a host tier's HostBuffer): every
// layer, K and V, of `count` pages in ONE launch per call, enqueued on the backend's stream (asynchronous on CUDA:
// synchronise the backend before touching the host bytes or reusing the source; the CPU backend completes on
// return).
//
// Slot layout ("page-first", layout.h): slot s starts at host.data() + s * slotBytes; its first payloadOffset
// bytes are a header that belongs to the caller (never read or written by the copies); the payload follows,
// for layer l = 0..L-1 in order the K page bytes of layer l then its V page bytes (pool.pageBytes(l) each):
// hostSlotPayloadBytes(pool) bytes. Bytes after the payload are never touched either.
//
// Invariants: every argument is checked before anything is enqueued (ContractError naming the argument; nothing
//             changed): page ids in [0, numPages), slot indices in [0, slotCount), count >= 0 with non-null arrays
//             when count > 0, no destination twice (a page in copyPagesFromHost, a slot in copyPagesToHost), a
//             host buffer of the pool's backend holding slotCount * slotBytes bytes, slotBytes >= payloadOffset +
//             payload bytes, and no overlap of the slots with the pool. CUDA and CPU produce identical bytes.
// Cost:       O(count log count) host work (the duplicate check), one descriptor-table upload of 32 bytes per
//             layer + 8 per page, one kernel that moves count * payload bytes (CUDA: over PCIe through the
//             mapped host memory, 16-byte accesses where aligned).
// Threading:  the backend's single-writer contract.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_page_pool.h"

namespace ctxcache::device {

struct HostSlotLayout {
    HostBuffer const* host = nullptr;  // the slots' memory, of the pool's backend
    size_t slotBytes = 0;              // slot s at host->data() + s * slotBytes
    size_t payloadOffset = 0;          // the payload within a slot; [0, payloadOffset) is the caller's header
    int32_t slotCount = 0;             // slots [0, slotCount); slotCount * slotBytes <= host->size()
};

// The payload of one slot: sum over layers of 2 * pool.pageBytes(l).
size_t hostSlotPayloadBytes(KvPagePool const& pool);

// Page pages[i] (every layer, K and V) into slot hostSlots[i], i < count.
void copyPagesToHost(KvPagePool const& pool, int32_t const* pages, int32_t const* hostSlots,
                     HostSlotLayout const& layout, int32_t count);
// Slot hostSlots[i] into page pages[i], i < count.
void copyPagesFromHost(KvPagePool& pool, int32_t const* pages, int32_t const* hostSlots, HostSlotLayout const& layout,
                       int32_t count);

}  // namespace ctxcache::device
