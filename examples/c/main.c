/* ctxcache from C: two requests share a 100-token system prompt; the second reuses the first one's six full
 * 16-token pages (96 tokens). Every call's status is checked; any surprise exits non-zero. */
#include <stdio.h>
#include <stdlib.h>

#include <ctxcache.h>

#define PAGE_SIZE 16
#define SYSTEM_TOKENS 100
#define MAX_BLOCKS 16

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

/* Hash the prompt's full blocks, acquire, (run the model), publish, release. Returns the tokens reused. */
static int32_t serve(ctxc_manager_t *manager, const int32_t *tokens, size_t token_count) {
    ctxc_hash128_t hashes[MAX_BLOCKS];
    size_t count = 0;
    check(ctxc_hash_full_blocks(NULL, tokens, token_count, PAGE_SIZE, NULL, 0, NULL, hashes, MAX_BLOCKS, &count),
          "ctxc_hash_full_blocks");

    ctxc_acquire_result_t result = {0};
    result.struct_size = sizeof result;
    ctxc_lease_t *lease = NULL;
    check(ctxc_manager_acquire_vanilla(manager, hashes, count, (int32_t)token_count, CTXC_LOOKUP_USE_CACHE, &result,
                                       &lease),
          "ctxc_manager_acquire_vanilla");
    expect(result.status == CTXC_ACQUIRE_ACQUIRED && lease != NULL, "acquire did not return a lease");

    const int32_t *pages = NULL;
    size_t page_count = 0;
    check(ctxc_lease_base_pages(lease, &pages, &page_count), "ctxc_lease_base_pages");
    expect(page_count == (token_count + PAGE_SIZE - 1) / PAGE_SIZE, "the lease covers the whole prompt");
    /* ... the runtime prefills tokens[reuse_token_length:] into `pages` here ... */

    ctxc_publish_result_t published = {0};
    published.struct_size = sizeof published;
    check(ctxc_manager_publish(manager, lease, hashes, count, (int32_t)token_count, &published),
          "ctxc_manager_publish");
    check(ctxc_lease_release(lease), "ctxc_lease_release");
    check(ctxc_lease_destroy(lease), "ctxc_lease_destroy");
    return result.plan.reuse_token_length;
}

int main(void) {
    expect(ctxc_abi_version() == CTXC_ABI_VERSION, "the header and the library agree on the ABI version");

    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = PAGE_SIZE;
    options.capacities.base_kv_pages = 64;
    options.max_records = 16;
    ctxc_manager_t *manager = NULL;
    check(ctxc_manager_create(&options, &manager), "ctxc_manager_create");

    int32_t first[SYSTEM_TOKENS + 3], second[SYSTEM_TOKENS + 4];
    for (int32_t i = 0; i < SYSTEM_TOKENS; ++i) first[i] = second[i] = i;
    for (int32_t i = 0; i < 3; ++i) first[SYSTEM_TOKENS + i] = 7 + i;
    for (int32_t i = 0; i < 4; ++i) second[SYSTEM_TOKENS + i] = 1000 + i;

    int32_t reused_first = serve(manager, first, sizeof first / sizeof first[0]);
    int32_t reused_second = serve(manager, second, sizeof second / sizeof second[0]);
    expect(reused_first == 0, "a cold cache reuses nothing");
    expect(reused_second == 96, "the second request reuses the six full pages of the system prompt");

    check(ctxc_manager_check_invariants(manager), "ctxc_manager_check_invariants");
    check(ctxc_manager_destroy(manager), "ctxc_manager_destroy");
    printf("ctxcache C example: first request reused %d tokens, second reused %d\n", reused_first, reused_second);
    return 0;
}
