// Chunked 128-bit FNV-1a of large buffers (media items): the reference 0.11 hashOpaqueIdentity scheme.
//
//   chunk size = ceil(n / numChunks) (numChunks = 2048 by default); chunk i = [min(i*cs, n), min((i+1)*cs, n))
//   partial_i  = plain FNV-1a 128 of chunk i from the offset basis (an empty chunk keeps the basis)
//   digest     = FNV-1a 128 from the offset basis over: Tag OpaqueIdentity (18), u64 n little-endian, then each
//                partial as hi u64 LE, lo u64 LE.
// The host path computes everything with ctxcache::fnv1a128; the device path runs the chunk phase as one launch
// (one thread per chunk) and reduces the partials on the host: the digests are bit-identical.
// Cost: O(n + numChunks) either way; the host path needs O(1) memory (partials are folded in as computed); the
// device path is one launch, one small download and O(numChunks) host work, and refuses a chunk count above the
// backend's maxHashChunks before it sizes anything.
// Threading: the host functions are pure; the device path follows the backend's single-writer contract.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/device/device_backend.h"

namespace ctxcache::device {

Hash128 chunkedFnv1a128Host(void const* bytes, uint64_t size, uint32_t numChunks = kDefaultHashChunks);
// The final reduction over numChunks partials of a buffer of totalSize bytes.
Hash128 combineChunkPartials(Hash128 const* partials, uint32_t numChunks, uint64_t totalSize);
// Chunk phase on the backend (deviceData is device memory of that backend), reduction here. `partials`
// (optional) is reused scratch for the numChunks partials.
Hash128 chunkedFnv1a128(DeviceBackend& backend, void const* deviceData, uint64_t size,
                        uint32_t numChunks = kDefaultHashChunks, std::vector<Hash128>* partials = nullptr);

}  // namespace ctxcache::device
