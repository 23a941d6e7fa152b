// An engine's batch as the runtime's C ABI reads it (ctxc_decoding_context_t) and a prompt as a
// ctxc_sequence_request_t, for the C ABI suites. Header-only; includes only "ctxcache.h". The views point into the
// Batch (and into the prompt's vector): rebuild them with operator() after every change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ctxcache.h"

// An engine's batch: per-row histories, prompt lengths, statuses, resident refs; as a ctxc_decoding_context_t.
struct Batch {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int32_t> raw;
    std::vector<int32_t> generated;
    std::vector<int32_t> status;
    std::vector<ctxc_resident_ref_t> refs;
    std::vector<int32_t const*> pointers;
    std::vector<int32_t> counts;
    ctxc_decoding_context_t c{};

    void add(std::vector<int32_t> prompt, int32_t slot, uint64_t epoch) {
        raw.push_back(static_cast<int32_t>(prompt.size()));
        tokens.push_back(std::move(prompt));
        generated.push_back(0);
        status.push_back(CTXC_SEQUENCE_RUNNING);
        refs.push_back(ctxc_resident_ref_t{slot, 0, epoch});
    }
    // The engine sampled `token` for row i.
    void sample(size_t i, int32_t token) {
        tokens[i].push_back(token);
        ++generated[i];
    }
    ctxc_decoding_context_t const* operator()() {
        ctxc_decoding_context_init(&c);
        pointers.clear();
        counts.clear();
        for (auto const& t : tokens) {
            pointers.push_back(t.data());
            counts.push_back(static_cast<int32_t>(t.size()));
        }
        c.active_batch_size = static_cast<int32_t>(tokens.size());
        c.token_ids = pointers.data();
        c.token_counts = counts.data();
        c.raw_input_lengths = raw.data();
        c.generated_lengths = generated.data();
        c.status = status.data();
        c.resident_refs = refs.data();
        return &c;
    }
};

inline ctxc_sequence_request_t sequenceOf(std::vector<int32_t> const& tokens) {
    ctxc_sequence_request_t s{};
    s.token_ids = tokens.data();
    s.token_count = tokens.size();
    s.lookup_policy = CTXC_INHERIT_LOOKUP_POLICY;
    return s;
}
