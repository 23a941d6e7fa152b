// Host buffers and the KV pool <-> host slot copies at the C ABI, as a C runtime sees them (links only the shared
// library, includes only "ctxcache.h"), on the CPU backend: the slot bytes land where the header documents, host
// bytes are counted apart from device bytes, engine memory is used in place, and every bad input is refused with
// its status, a message naming the function and the argument, and nothing changed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "capi_test_support.h"
#include "ctxcache.h"

namespace {

using Bytes = std::vector<uint8_t>;

// 4 K pages of 4 tokens, fp16; layer 0: 1 head x 2 dims (16-byte pages), layer 1: 2 heads x 2 dims (32-byte pages).
ctxc_kv_pool_t* makePool(ctxc_device_backend_t* b) {
    ctxc_kv_layer_shape_t const layers[] = {{1, 2}, {2, 2}};
    ctxc_kv_pool_options_t o;
    ctxc_kv_pool_options_init(&o);
    o.num_pages = 4;
    o.page_size = 4;
    o.layers = layers;
    o.layer_count = 2;
    ctxc_kv_pool_t* pool = nullptr;
    EXPECT_EQ(ctxc_kv_pool_create(b, &o, &pool), CTXC_OK) << ctxc_last_error();
    for (int32_t layer = 0; layer < 2; ++layer) {
        size_t pageBytes = 0;
        EXPECT_EQ(ctxc_kv_pool_page_bytes(pool, layer, &pageBytes), CTXC_OK);
        Bytes const bytes = pattern(8 * pageBytes, 10 + static_cast<unsigned>(layer));
        EXPECT_EQ(ctxc_kv_pool_write_pages(pool, layer, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
    }
    return pool;
}

ctxc_host_buffer_t* makeHost(ctxc_device_backend_t* b, size_t bytes) {
    ctxc_host_buffer_options_t o;
    ctxc_host_buffer_options_init(&o);
    o.bytes = bytes;
    ctxc_host_buffer_t* host = nullptr;
    EXPECT_EQ(ctxc_host_buffer_create(b, &o, &host), CTXC_OK) << ctxc_last_error();
    return host;
}

Bytes readPages(ctxc_kv_pool_t const* pool, int32_t layer) {
    size_t pageBytes = 0;
    EXPECT_EQ(ctxc_kv_pool_page_bytes(pool, layer, &pageBytes), CTXC_OK);
    Bytes out(8 * pageBytes);
    EXPECT_EQ(ctxc_kv_pool_read_pages(pool, layer, 0, 8, out.data(), out.size()), CTXC_OK);
    return out;
}

Bytes readHost(ctxc_host_buffer_t const* host) {
    size_t size = 0;
    EXPECT_EQ(ctxc_host_buffer_size(host, &size), CTXC_OK);
    Bytes out(size);
    EXPECT_EQ(ctxc_host_buffer_read(host, 0, out.data(), size), CTXC_OK) << ctxc_last_error();
    return out;
}

size_t hostAllocated(ctxc_device_backend_t const* b) {
    size_t n = 0;
    EXPECT_EQ(ctxc_device_backend_allocated_host_bytes(b, &n), CTXC_OK);
    return n;
}

size_t deviceAllocated(ctxc_device_backend_t const* b) {
    size_t n = 0;
    EXPECT_EQ(ctxc_device_backend_allocated_bytes(b, &n), CTXC_OK);
    return n;
}

}  // namespace

TEST(CapiHostCopy, PagesRoundTripThroughSlotsLaidOutAsTheHeaderSays) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = makePool(b);
    size_t const deviceBefore = deviceAllocated(b);
    size_t payload = 0;
    ASSERT_EQ(ctxc_kv_pool_host_payload_bytes(pool, &payload), CTXC_OK);
    EXPECT_EQ(payload, 2u * 16 + 2u * 32);
    size_t const slotBytes = 8 + payload;  // an 8-byte header per slot
    ctxc_host_buffer_t* host = makeHost(b, 3 * slotBytes);
    EXPECT_EQ(hostAllocated(b), 3 * slotBytes);
    EXPECT_EQ(deviceAllocated(b), deviceBefore);
    void* data = nullptr;
    ASSERT_EQ(ctxc_host_buffer_data(host, &data), CTXC_OK);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 4096, 0u);
    Bytes const headers(3 * slotBytes, 0xAA);
    ASSERT_EQ(ctxc_host_buffer_write(host, 0, headers.data(), headers.size()), CTXC_OK);

    ctxc_host_slot_layout_t layout;
    ctxc_host_slot_layout_init(&layout);
    layout.slot_count = 3;
    layout.slot_bytes = slotBytes;
    layout.payload_offset = 8;
    int32_t const pages[] = {3, 1};
    int32_t const slots[] = {0, 2};
    ASSERT_EQ(ctxc_kv_pool_copy_pages_to_host(pool, pages, slots, 2, host, &layout), CTXC_OK) << ctxc_last_error();

    Bytes expected = headers;
    Bytes const layer0 = readPages(pool, 0), layer1 = readPages(pool, 1);
    for (int i = 0; i < 2; ++i) {
        size_t at = static_cast<size_t>(slots[i]) * slotBytes + 8;
        for (auto const& [layer, pageBytes] : {std::pair{&layer0, size_t{16}}, std::pair{&layer1, size_t{32}}})
            for (int32_t flat : {pages[i], pages[i] + 4}) {
                std::memcpy(expected.data() + at, layer->data() + flat * pageBytes, pageBytes);
                at += pageBytes;
            }
    }
    EXPECT_EQ(readHost(host), expected);
    EXPECT_EQ(Bytes(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + expected.size()), expected);

    // Slot 0 (page 3) into page 0 and slot 2 (page 1) into page 2.
    int32_t const back[] = {0, 2};
    ASSERT_EQ(ctxc_kv_pool_copy_pages_from_host(pool, back, slots, 2, host, &layout), CTXC_OK) << ctxc_last_error();
    Bytes want0 = layer0, want1 = layer1;
    for (auto const& [want, source, pageBytes] :
         {std::tuple{&want0, &layer0, size_t{16}}, std::tuple{&want1, &layer1, size_t{32}}})
        for (int32_t half = 0; half < 2; ++half) {
            std::memcpy(want->data() + (0 + 4 * half) * pageBytes, source->data() + (3 + 4 * half) * pageBytes,
                        pageBytes);
            std::memcpy(want->data() + (2 + 4 * half) * pageBytes, source->data() + (1 + 4 * half) * pageBytes,
                        pageBytes);
        }
    EXPECT_EQ(readPages(pool, 0), want0);
    EXPECT_EQ(readPages(pool, 1), want1);

    EXPECT_EQ(ctxc_host_buffer_destroy(host), CTXC_OK);
    EXPECT_EQ(hostAllocated(b), 0u);
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(CapiHostCopy, AHostBufferOverEngineMemoryIsUsedInPlaceAndNotCounted) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = makePool(b);
    Bytes engine(512, 0x5C);
    ctxc_host_buffer_options_t o;
    ctxc_host_buffer_options_init(&o);
    o.bytes = 256;
    o.external_data = engine.data();
    o.external_bytes = engine.size();
    ctxc_host_buffer_t* host = nullptr;
    ASSERT_EQ(ctxc_host_buffer_create(b, &o, &host), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(hostAllocated(b), 0u);
    size_t size = 0;
    EXPECT_EQ(ctxc_host_buffer_size(host, &size), CTXC_OK);
    EXPECT_EQ(size, 256u);
    void* data = nullptr;
    EXPECT_EQ(ctxc_host_buffer_data(host, &data), CTXC_OK);
    EXPECT_EQ(data, engine.data());
    EXPECT_EQ(engine, Bytes(512, 0x5C));  // not zeroed at creation
    ctxc_host_slot_layout_t layout;
    ctxc_host_slot_layout_init(&layout);
    layout.slot_count = 2;
    layout.slot_bytes = 96;
    int32_t const page[] = {2};
    int32_t const slot[] = {1};
    ASSERT_EQ(ctxc_kv_pool_copy_pages_to_host(pool, page, slot, 1, host, &layout), CTXC_OK) << ctxc_last_error();
    Bytes const layer0 = readPages(pool, 0);
    EXPECT_EQ(Bytes(engine.begin() + 96, engine.begin() + 112), Bytes(layer0.begin() + 32, layer0.begin() + 48));
    EXPECT_EQ(Bytes(engine.begin(), engine.begin() + 96), Bytes(96, 0x5C));
    EXPECT_EQ(ctxc_host_buffer_destroy(host), CTXC_OK);
    EXPECT_EQ(engine[0], 0x5C);  // never freed: still the engine's
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(CapiHostCopy, EveryBadInputIsRefusedWithNothingChanged) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_device_backend_t* other = cpuBackend();
    ctxc_kv_pool_t* pool = makePool(b);
    size_t payload = 0;
    ASSERT_EQ(ctxc_kv_pool_host_payload_bytes(pool, &payload), CTXC_OK);
    ctxc_host_buffer_t* host = makeHost(b, 2 * payload);
    ctxc_host_buffer_t* foreign = makeHost(other, 2 * payload);
    Bytes const marks = pattern(2 * payload, 3);
    ASSERT_EQ(ctxc_host_buffer_write(host, 0, marks.data(), marks.size()), CTXC_OK);
    Bytes const pool0 = readPages(pool, 0), pool1 = readPages(pool, 1);
    ctxc_host_slot_layout_t layout;
    ctxc_host_slot_layout_init(&layout);
    layout.slot_count = 2;
    layout.slot_bytes = payload;
    int32_t const one[] = {0};
    int32_t const pair[] = {0, 1};
    int32_t const same[] = {1, 1};
    int32_t const page4[] = {4};
    int32_t const slot2[] = {2};
    char const* toHost = "ctxc_kv_pool_copy_pages_to_host";
    char const* fromHost = "ctxc_kv_pool_copy_pages_from_host";

    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(nullptr, one, one, 1, host, &layout), CTXC_E_INVALID_HANDLE,
                        toHost, "pool"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_from_host(pool, one, one, 1, nullptr, &layout), CTXC_E_INVALID_HANDLE,
                        fromHost, "host"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, nullptr, one, 1, host, &layout), CTXC_E_INVALID_ARGUMENT,
                        toHost, "pages is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_from_host(pool, one, nullptr, 1, host, &layout),
                        CTXC_E_INVALID_ARGUMENT, fromHost, "host_slots is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, host, nullptr), CTXC_E_INVALID_ARGUMENT,
                        toHost, "layout is NULL"));
    ctxc_host_slot_layout_t unsized = layout;
    unsized.struct_size = 0;
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, host, &unsized), CTXC_E_INVALID_ARGUMENT,
                        toHost, "layout->struct_size"));
    ctxc_host_slot_layout_t negative = layout;
    negative.slot_count = -1;
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, host, &negative), CTXC_E_INVALID_ARGUMENT,
                        toHost, "layout->slot_count is negative"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, page4, one, 1, host, &layout), CTXC_E_CONTRACT, toHost,
                        "pages[0] = 4 is outside [0, 4)"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_from_host(pool, one, slot2, 1, host, &layout), CTXC_E_CONTRACT,
                        fromHost, "hostSlots[0] = 2 is outside [0, 2)"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, pair, same, 2, host, &layout), CTXC_E_CONTRACT, toHost,
                        "host slot 1 is a destination twice"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_from_host(pool, same, pair, 2, host, &layout), CTXC_E_CONTRACT,
                        fromHost, "page 1 is a destination twice"));
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, foreign, &layout), CTXC_E_CONTRACT, toHost,
                        "share one backend"));
    ctxc_host_slot_layout_t tooMany = layout;
    tooMany.slot_count = 3;
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, host, &tooMany), CTXC_E_CONTRACT, toHost,
                        "do not fit the host buffer"));
    ctxc_host_slot_layout_t shortSlots = layout;
    shortSlots.payload_offset = 1;
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_from_host(pool, one, one, 1, host, &shortSlots), CTXC_E_CONTRACT,
                        fromHost, "is less than payloadOffset 1"));

    uint8_t byte = 0;
    EXPECT_TRUE(refused(ctxc_host_buffer_read(host, 2 * payload, &byte, 1), CTXC_E_CONTRACT, "ctxc_host_buffer_read",
                        "outside the host buffer's"));
    EXPECT_TRUE(refused(ctxc_host_buffer_write(host, 0, nullptr, 1), CTXC_E_INVALID_ARGUMENT, "ctxc_host_buffer_write",
                        "src is NULL"));
    ctxc_host_buffer_options_t o;
    ctxc_host_buffer_options_init(&o);
    o.bytes = 64;
    o.external_data = &byte;
    o.external_bytes = 1;
    ctxc_host_buffer_t* made = host;
    EXPECT_TRUE(refused(ctxc_host_buffer_create(b, &o, &made), CTXC_E_INVALID_ARGUMENT, "ctxc_host_buffer_create",
                        "external_bytes 1 is less than options->bytes 64"));
    EXPECT_EQ(made, nullptr);
    o.external_data = nullptr;
    o.external_bytes = 64;
    EXPECT_TRUE(
        refused(ctxc_host_buffer_create(b, &o, &made), CTXC_E_INVALID_ARGUMENT, "ctxc_host_buffer_create", "NULL"));
    ctxc_host_buffer_options_init(&o);
    o.bytes = SIZE_MAX - 16;
    EXPECT_TRUE(refused(ctxc_host_buffer_create(b, &o, &made), CTXC_E_NO_MEMORY, "ctxc_host_buffer_create",
                        std::to_string(SIZE_MAX - 16).c_str()));
    EXPECT_TRUE(refused(ctxc_host_buffer_create(nullptr, &o, &made), CTXC_E_INVALID_HANDLE, "ctxc_host_buffer_create",
                        "backend"));

    EXPECT_EQ(readHost(host), marks);
    EXPECT_EQ(readPages(pool, 0), pool0);
    EXPECT_EQ(readPages(pool, 1), pool1);
    EXPECT_EQ(hostAllocated(b), 2 * payload);

    // A destroyed host buffer is a stale handle, and destroy accepts NULL.
    EXPECT_EQ(ctxc_host_buffer_destroy(host), CTXC_OK);
    EXPECT_TRUE(refused(ctxc_kv_pool_copy_pages_to_host(pool, one, one, 1, host, &layout), CTXC_E_INVALID_HANDLE,
                        toHost, "host"));
    EXPECT_TRUE(
        refused(ctxc_host_buffer_size(host, &payload), CTXC_E_INVALID_HANDLE, "ctxc_host_buffer_size", "buffer"));
    EXPECT_EQ(ctxc_host_buffer_destroy(nullptr), CTXC_OK);
    EXPECT_EQ(hostAllocated(b), 0u);
    EXPECT_EQ(ctxc_host_buffer_destroy(foreign), CTXC_OK);
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(other), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}
