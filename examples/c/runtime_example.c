/* The ctxcache runtime from C: an engine's request lifecycle over a coordinator (docs/RUNTIME.md).
 *
 * A CPU backend with one paged KV pool, a page table and device KV lengths; a coordinator over them. Request 1
 * admits two prompts, "prefills" them by writing K and V through the page table (as an attention kernel would),
 * completes prefill with a sampled lookahead token, runs two decode steps and finishes (both rows finish normally,
 * so their histories are published). Request 2 shares prefixes with both: it must start its prefill at the reuse
 * lengths, and the reused pages must hold exactly the bytes request 1 wrote. Every status is checked; any
 * surprise exits non-zero. ctest `install.examples` builds and runs this against the installed package. */
#include <stdio.h>
#include <stdlib.h>

#include <ctxcache.h>

#define PAGE_SIZE 4
#define NUM_PAGES 32
#define MAX_BATCH 4
#define MAX_PAGES_PER_SEQ 8
#define MAX_TOKENS 32
#define HEAD_DIM 2 /* one KV head of two floats: K = (token, position), V = (-token, position) */

static void check(ctxc_status_t status, const char *what) {
    if (status != CTXC_OK) {
        fprintf(stderr, "%s: %s (%s)\n", what, ctxc_status_string(status), ctxc_last_error());
        exit(1);
    }
}

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "unexpected: %s\n", what);
        exit(1);
    }
}

/* The engine's live batch: per row the full token history (prompt + generated, the last one being the lookahead
 * token whose KV is not written yet), the prompt length, the tokens generated, the status and the resident ref. */
typedef struct batch {
    int32_t rows;
    int32_t tokens[MAX_BATCH][MAX_TOKENS];
    int32_t token_counts[MAX_BATCH];
    int32_t raw_input_lengths[MAX_BATCH];
    int32_t generated_lengths[MAX_BATCH];
    int32_t status[MAX_BATCH];
    ctxc_resident_ref_t refs[MAX_BATCH];
    const int32_t *token_ids[MAX_BATCH];
    ctxc_decoding_context_t context;
} batch_t;

static void batch_add(batch_t *b, const int32_t *prompt, int32_t count, int32_t slot, uint64_t epoch) {
    int32_t const row = b->rows++;
    for (int32_t i = 0; i < count; ++i) b->tokens[row][i] = prompt[i];
    b->token_counts[row] = count;
    b->raw_input_lengths[row] = count;
    b->generated_lengths[row] = 0;
    b->status[row] = CTXC_SEQUENCE_RUNNING;
    b->refs[row].slot = slot;
    b->refs[row].reserved = 0;
    b->refs[row].epoch = epoch;
}

/* The engine sampled `token` for `row`: it becomes the row's lookahead token. */
static void batch_sample(batch_t *b, int32_t row, int32_t token) {
    b->tokens[row][b->token_counts[row]++] = token;
    ++b->generated_lengths[row];
}

static const ctxc_decoding_context_t *batch_context(batch_t *b) {
    ctxc_decoding_context_init(&b->context);
    for (int32_t row = 0; row < b->rows; ++row) b->token_ids[row] = b->tokens[row];
    b->context.active_batch_size = b->rows;
    b->context.token_ids = b->token_ids;
    b->context.token_counts = b->token_counts;
    b->context.raw_input_lengths = b->raw_input_lengths;
    b->context.generated_lengths = b->generated_lengths;
    b->context.status = b->status;
    b->context.resident_refs = b->refs;
    return &b->context;
}

static ctxc_sequence_request_t sequence_of(const batch_t *b, int32_t row) {
    ctxc_sequence_request_t s = {0};
    s.token_ids = b->tokens[row];
    s.token_count = (size_t)b->raw_input_lengths[row];
    s.lookup_policy = CTXC_INHERIT_LOOKUP_POLICY;
    return s;
}

/* What the engine's kernels see: the pool's layer 0, [2, NUM_PAGES, PAGE_SIZE, 1, HEAD_DIM] fp32, and the device
 * page table, int32 [MAX_BATCH, 2, MAX_PAGES_PER_SEQ], indexed by resident slot (on the CPU backend both are host
 * memory; on CUDA the same pointers are device memory for the engine's kernels). */
typedef struct engine {
    float *kv;
    const int32_t *table;
} engine_t;

static float *kv_at(const engine_t *e, int32_t half, int32_t slot, int32_t position) {
    int32_t const k_page = e->table[(slot * 2 + 0) * MAX_PAGES_PER_SEQ + position / PAGE_SIZE];
    expect(k_page >= 0 && k_page < NUM_PAGES, "the page table maps every position below committed + headroom");
    return e->kv +
           (((size_t)half * NUM_PAGES + (size_t)k_page) * PAGE_SIZE + (size_t)(position % PAGE_SIZE)) * HEAD_DIM;
}

/* The "attention kernel" writing the KV of one token at `position` of resident slot `slot`. */
static void store_kv(const engine_t *e, int32_t slot, int32_t position, int32_t token) {
    float *k = kv_at(e, 0, slot, position);
    float *v = kv_at(e, 1, slot, position);
    k[0] = (float)token;
    k[1] = (float)position;
    v[0] = (float)-token;
    v[1] = (float)position;
}

static int kv_holds(const engine_t *e, int32_t slot, int32_t position, int32_t token) {
    const float *k = kv_at(e, 0, slot, position);
    const float *v = kv_at(e, 1, slot, position);
    return k[0] == (float)token && k[1] == (float)position && v[0] == (float)-token && v[1] == (float)position;
}

static void read_lengths(const ctxc_kv_lengths_t *lengths, int32_t *values, size_t *count) {
    check(ctxc_kv_lengths_read(lengths, values, MAX_BATCH, count), "ctxc_kv_lengths_read");
}

/* begin -> prepare_prefill -> [engine prefill of tokens[prefill_start:]] -> enqueue_prefill_captures ->
 * [sample the lookahead token] -> complete_prefill. Returns the request. */
static ctxc_kv_request_t *begin_and_prefill(ctxc_coordinator_t *coordinator, ctxc_kv_lengths_t *lengths,
                                            const engine_t *engine, batch_t *b, int32_t *starts_out) {
    ctxc_sequence_request_t sequences[MAX_BATCH];
    for (int32_t row = 0; row < b->rows; ++row) sequences[row] = sequence_of(b, row);
    ctxc_kv_request_options_t options;
    ctxc_kv_request_options_init(&options); /* committed + lookahead, including generated tokens, headroom {1, 0} */
    ctxc_kv_request_t *request = NULL;
    check(ctxc_kv_request_begin(coordinator, sequences, (size_t)b->rows, batch_context(b), &options, &request),
          "ctxc_kv_request_begin");

    const int32_t *starts = NULL;
    size_t start_count = 0;
    check(ctxc_kv_request_prefill_starts(request, &starts, &start_count), "ctxc_kv_request_prefill_starts");
    expect(start_count == (size_t)b->rows, "one prefill start per row");
    for (int32_t row = 0; row < b->rows; ++row) starts_out[row] = starts[row];

    /* Rows bound to their resident slots' page-table rows (uploaded), device KV lengths = the reuse lengths. */
    check(ctxc_kv_request_prepare_prefill(request), "ctxc_kv_request_prepare_prefill");
    int32_t values[MAX_BATCH];
    size_t count = 0;
    read_lengths(lengths, values, &count);
    expect(count == (size_t)b->rows, "the device lengths cover the batch");
    for (int32_t row = 0; row < b->rows; ++row) expect(values[row] == starts_out[row], "lengths start at reuse");

    /* The engine's prefill: only tokens[prefill_start:], attending to the reused KV through the page table. */
    for (int32_t row = 0; row < b->rows; ++row) {
        for (int32_t p = starts_out[row]; p < b->raw_input_lengths[row]; ++p)
            store_kv(engine, b->refs[row].slot, p, b->tokens[row][p]);
        values[row] = b->raw_input_lengths[row];
    }
    check(ctxc_kv_lengths_set(lengths, values, (size_t)b->rows), "ctxc_kv_lengths_set");
    check(ctxc_kv_request_enqueue_prefill_captures(request), "ctxc_kv_request_enqueue_prefill_captures");

    /* The engine synchronises and samples each row's lookahead token; then prefill-end publication. */
    for (int32_t row = 0; row < b->rows; ++row) batch_sample(b, row, 1000 + 100 * row);
    check(ctxc_kv_request_complete_prefill(request, batch_context(b), NULL, 0), "ctxc_kv_request_complete_prefill");
    return request;
}

/* One decode step: prepare_decode_step -> [engine step: KV of the lookahead token, sample] -> complete. Rows
 * marked finished here are published at decode end (they gained a token in this very step). */
static void decode_step(ctxc_kv_request_t *request, ctxc_kv_lengths_t *lengths, const engine_t *engine, batch_t *b,
                        int last) {
    check(ctxc_kv_request_prepare_decode_step(request, batch_context(b), NULL), "ctxc_kv_request_prepare_decode_step");
    for (int32_t row = 0; row < b->rows; ++row) {
        int32_t const position = b->token_counts[row] - 1; /* the lookahead token's KV goes here */
        store_kv(engine, b->refs[row].slot, position, b->tokens[row][position]);
        batch_sample(b, row, 1000 + 100 * row + b->generated_lengths[row]);
        if (last) b->status[row] = CTXC_SEQUENCE_FINISHED;
    }
    check(ctxc_kv_lengths_add(lengths, 1), "ctxc_kv_lengths_add");
    check(ctxc_kv_request_complete_decode_step(request, batch_context(b), NULL, 0),
          "ctxc_kv_request_complete_decode_step");
}

static void finish(ctxc_kv_request_t *request) {
    check(ctxc_kv_request_finish(request), "ctxc_kv_request_finish");
    check(ctxc_kv_request_destroy(request), "ctxc_kv_request_destroy");
}

int main(void) {
    /* The device objects: backend, one KV pool, one page table, device KV lengths. */
    ctxc_device_backend_options_t bo;
    ctxc_device_backend_options_init(&bo);
    bo.kind = CTXC_BACKEND_CPU;
    ctxc_device_backend_t *backend = NULL;
    check(ctxc_device_backend_create(&bo, &backend), "ctxc_device_backend_create");

    ctxc_kv_layer_shape_t const layer = {1, HEAD_DIM};
    ctxc_kv_pool_options_t po;
    ctxc_kv_pool_options_init(&po);
    po.num_pages = NUM_PAGES;
    po.page_size = PAGE_SIZE;
    po.dtype = CTXC_DTYPE_FP32;
    po.layers = &layer;
    po.layer_count = 1;
    ctxc_kv_pool_t *pool = NULL;
    check(ctxc_kv_pool_create(backend, &po, &pool), "ctxc_kv_pool_create");

    ctxc_kv_page_table_options_t to;
    ctxc_kv_page_table_options_init(&to);
    to.max_batch = MAX_BATCH;
    to.max_pages_per_seq = MAX_PAGES_PER_SEQ;
    to.num_pages = NUM_PAGES;
    ctxc_kv_page_table_t *table = NULL;
    check(ctxc_kv_page_table_create(backend, &to, &table), "ctxc_kv_page_table_create");

    ctxc_kv_lengths_options_t lo;
    ctxc_kv_lengths_options_init(&lo);
    lo.max_batch = MAX_BATCH;
    ctxc_kv_lengths_t *lengths = NULL;
    check(ctxc_kv_lengths_create(backend, &lo, &lengths), "ctxc_kv_lengths_create");

    /* The coordinator over them (attention only; synchronize NULL = synchronise the backend). */
    ctxc_coordinator_resources_t resources;
    ctxc_coordinator_resources_init(&resources);
    resources.base_pool = pool;
    resources.base_page_table = table;
    resources.base_lengths = lengths;
    ctxc_coordinator_options_t co;
    ctxc_coordinator_options_init(&co);
    co.max_batch = MAX_BATCH;
    co.max_records = 16;
    ctxc_coordinator_t *coordinator = NULL;
    check(ctxc_coordinator_create(&resources, &co, &coordinator), "ctxc_coordinator_create");

    /* The engine's view of the memory: the pool's layer and the device page table. */
    ctxc_device_view_t pool_view = {0}, table_view = {0};
    pool_view.struct_size = sizeof pool_view;
    table_view.struct_size = sizeof table_view;
    check(ctxc_kv_pool_layer_view(pool, 0, &pool_view), "ctxc_kv_pool_layer_view");
    check(ctxc_kv_page_table_device_view(table, &table_view), "ctxc_kv_page_table_device_view");
    expect(pool_view.element == CTXC_ELEMENT_FP32 && pool_view.ndim == 5 && pool_view.shape[1] == NUM_PAGES,
           "the layer view is [2, num_pages, page_size, kv_heads, head_dim] fp32");
    engine_t const engine = {(float *)pool_view.data, (const int32_t *)table_view.data};

    /* Request 1: two cold prompts, two decode steps, both rows finish normally. */
    batch_t first = {0};
    int32_t prompt_a[10], prompt_b[10];
    for (int32_t i = 0; i < 10; ++i) {
        prompt_a[i] = 1 + i;
        prompt_b[i] = 101 + i;
    }
    batch_add(&first, prompt_a, 10, /*slot=*/0, /*epoch=*/1);
    batch_add(&first, prompt_b, 10, /*slot=*/1, /*epoch=*/1);
    int32_t starts[MAX_BATCH];
    ctxc_kv_request_t *request = begin_and_prefill(coordinator, lengths, &engine, &first, starts);
    expect(starts[0] == 0 && starts[1] == 0, "a cold cache reuses nothing");
    decode_step(request, lengths, &engine, &first, 0);
    decode_step(request, lengths, &engine, &first, 1);
    ctxc_kv_sequence_info_t info = {0};
    info.struct_size = sizeof info;
    check(ctxc_kv_request_sequence_info(request, 0, &info), "ctxc_kv_request_sequence_info");
    expect(info.committed_length == 12, "10 prompt tokens + 2 with KV (the last sampled one is the lookahead)");
    expect(info.published_full_block_count == 3, "decode end published the 3 full blocks of the 12 committed");
    finish(request);

    /* Request 2 (the slots are handed out again: epochs grow): row 0 continues row 0's history, row 1 shares only
     * the first block of row 1's prompt. */
    batch_t second = {0};
    int32_t prompt_c[14], prompt_d[9];
    for (int32_t i = 0; i < 12; ++i) prompt_c[i] = first.tokens[0][i];
    prompt_c[12] = 7;
    prompt_c[13] = 8;
    for (int32_t i = 0; i < 6; ++i) prompt_d[i] = prompt_b[i];
    prompt_d[6] = 99;
    prompt_d[7] = 98;
    prompt_d[8] = 97;
    batch_add(&second, prompt_c, 14, /*slot=*/0, /*epoch=*/2);
    batch_add(&second, prompt_d, 9, /*slot=*/1, /*epoch=*/2);
    request = begin_and_prefill(coordinator, lengths, &engine, &second, starts);
    printf("ctxcache C runtime example: request 2 prefill starts %d and %d\n", starts[0], starts[1]);
    expect(starts[0] == 12, "row 0 reuses the 12 tokens request 1 published at decode end");
    expect(starts[1] == 4, "row 1 reuses the one full block it shares");
    for (int32_t p = 0; p < 12; ++p) expect(kv_holds(&engine, 0, p, prompt_c[p]), "reused KV is request 1's");
    for (int32_t p = 0; p < 4; ++p) expect(kv_holds(&engine, 1, p, prompt_d[p]), "reused KV is request 1's");
    finish(request);

    ctxc_context_cache_metrics_t metrics = {0};
    metrics.struct_size = sizeof metrics;
    check(ctxc_coordinator_metrics(coordinator, &metrics), "ctxc_coordinator_metrics");
    expect(metrics.admitted_sequences == 4 && metrics.hit_sequences == 2 && metrics.reused_tokens == 16,
           "4 sequences admitted, 2 hits, 16 tokens reused");
    check(ctxc_coordinator_check_invariants(coordinator), "ctxc_coordinator_check_invariants");

    check(ctxc_coordinator_destroy(coordinator), "ctxc_coordinator_destroy");
    check(ctxc_kv_lengths_destroy(lengths), "ctxc_kv_lengths_destroy");
    check(ctxc_kv_page_table_destroy(table), "ctxc_kv_page_table_destroy");
    check(ctxc_kv_pool_destroy(pool), "ctxc_kv_pool_destroy");
    size_t bytes = 1;
    check(ctxc_device_backend_allocated_bytes(backend, &bytes), "ctxc_device_backend_allocated_bytes");
    expect(bytes == 0, "every device byte was freed");
    check(ctxc_device_backend_destroy(backend), "ctxc_device_backend_destroy");
    printf("ctxcache C runtime example: %llu tokens reused, ok\n", (unsigned long long)metrics.reused_tokens);
    return 0;
}
