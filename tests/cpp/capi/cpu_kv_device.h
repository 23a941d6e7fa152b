// The device objects the C ABI fixtures build a coordinator or a bounded-SWA manager over, created and destroyed
// once for all of them: a CPU backend, a pool of 4-token pages (one layer of one 2-wide KV head), a page table for 4
// sequences and lengths for 4, and the options of the coordinators and the bounded-SWA manager the suites build over
// them. A fixture derives from it beside its ::testing::Test (or TestWithParam), so its tests name backend, pool, table
// and lengths directly. Header-only; includes only "ctxcache.h" and GoogleTest.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "ctxcache.h"
#include "device_creates.h"

// A pool of numPages 4-token pages of one layer (one KV head of 2 elements) on backend.
inline ctxc_status_t createKvPool(ctxc_device_backend_t* backend, int32_t numPages, ctxc_kv_pool_t** out) {
    static ctxc_kv_layer_shape_t const layer{1, 2};
    ctxc_kv_pool_options_t po;
    ctxc_kv_pool_options_init(&po);
    po.num_pages = numPages;
    po.page_size = 4;
    po.layers = &layer;
    po.layer_count = 1;
    return ctxc_kv_pool_create(backend, &po, out);
}

struct CpuKvDevice {
    ctxc_device_backend_t* backend = nullptr;
    ctxc_kv_pool_t* pool = nullptr;
    ctxc_kv_page_table_t* table = nullptr;
    ctxc_kv_lengths_t* lengths = nullptr;

    // Creates them: numPages pages, a 4 x pagesPerSeq table in tableMode (CTXC_PAGE_TABLE_*). A create that fails is
    // a fatal failure of the calling SetUp (wrap the call in ASSERT_NO_FATAL_FAILURE) and leaves the rest NULL.
    void createDevice(int32_t numPages, int32_t pagesPerSeq, int32_t tableMode) {
        ctxc_device_backend_options_t bo;
        ctxc_device_backend_options_init(&bo);
        bo.kind = CTXC_BACKEND_CPU;
        ASSERT_EQ(ctxc_device_backend_create(&bo, &backend), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(createKvPool(backend, numPages, &pool), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(createPageTable(backend, 4, pagesPerSeq, numPages, tableMode, &table), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(createLengths(backend, 4, &lengths), CTXC_OK) << ctxc_last_error();
    }

    // Destroys them, the lengths first and the backend last (a handle a test destroyed itself and set to NULL is a
    // no-op). With checkLeaks, and a backend still there, expects it to hold no device memory before it goes.
    void destroyDevice(bool checkLeaks) {
        EXPECT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
        EXPECT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
        EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
        if (checkLeaks && backend) {
            size_t bytes = 1;
            EXPECT_EQ(ctxc_device_backend_allocated_bytes(backend, &bytes), CTXC_OK);
            EXPECT_EQ(bytes, 0u) << "device memory leaked";
        }
        EXPECT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
    }

    // A bounded-SWA manager over them: 4 slots and a window of 8 tokens, synchronised through synchronize(user).
    ctxc_status_t createSwaManager(ctxc_synchronize_fn synchronize, void* user, ctxc_swa_manager_t** out) const {
        ctxc_swa_manager_options_t o;
        ctxc_swa_manager_options_init(&o);
        o.max_batch = 4;
        o.window_size_tokens = 8;
        o.synchronize = synchronize;
        o.synchronize_user = user;
        return ctxc_swa_manager_create(pool, table, lengths, &o, out);
    }

    // A coordinator's options over them: 4 slots, 8 records, model state kind (CTXC_MODEL_*), synchronised through
    // synchronize(user).
    static ctxc_coordinator_options_t coordinatorOptions(int32_t kind, ctxc_synchronize_fn synchronize, void* user) {
        ctxc_coordinator_options_t o;
        ctxc_coordinator_options_init(&o);
        o.max_batch = 4;
        o.max_records = 8;
        o.model_state_kind = kind;
        o.synchronize = synchronize;
        o.synchronize_user = user;
        return o;
    }

    // The pool, table and lengths as a coordinator's base resources.
    ctxc_coordinator_resources_t baseResources() const {
        ctxc_coordinator_resources_t r;
        ctxc_coordinator_resources_init(&r);
        r.base_pool = pool;
        r.base_page_table = table;
        r.base_lengths = lengths;
        return r;
    }
};
