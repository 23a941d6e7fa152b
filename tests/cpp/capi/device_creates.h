// The device layer's C creates with the arguments tests and fuzz targets vary, each filling its options struct
// through the matching _init call. Header-only; includes only "ctxcache.h" (shared by the C ABI suites, which link
// the shared library alone, and by tests/fuzz/device_fuzz.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ctxcache.h"

inline ctxc_status_t createBuffer(ctxc_device_backend_t* backend, size_t bytes, ctxc_device_buffer_t** out) {
    ctxc_device_buffer_options_t o;
    ctxc_device_buffer_options_init(&o);
    o.bytes = bytes;
    return ctxc_device_buffer_create(backend, &o, out);
}

inline ctxc_status_t createPageTable(ctxc_device_backend_t* backend, int32_t maxBatch, int32_t maxPagesPerSeq,
                                     int32_t numPages, int32_t mode, ctxc_kv_page_table_t** out) {
    ctxc_kv_page_table_options_t o;
    ctxc_kv_page_table_options_init(&o);
    o.max_batch = maxBatch;
    o.max_pages_per_seq = maxPagesPerSeq;
    o.num_pages = numPages;
    o.mode = mode;
    return ctxc_kv_page_table_create(backend, &o, out);
}

inline ctxc_status_t createLengths(ctxc_device_backend_t* backend, int32_t maxBatch, ctxc_kv_lengths_t** out) {
    ctxc_kv_lengths_options_t o;
    ctxc_kv_lengths_options_init(&o);
    o.max_batch = maxBatch;
    return ctxc_kv_lengths_create(backend, &o, out);
}
