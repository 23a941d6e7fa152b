/* ctxcache C ABI: a manager's KV events in vLLM's vocabulary (docs/EVENTS.md): the event stream, its drain,
 * and the ZMQ publisher that sends it to cluster routers. Every call follows the single-writer
 * contract of the cache object it names; a publisher may be used from any thread. */
#ifndef CTXCACHE_C_KV_EVENTS_H
#define CTXCACHE_C_KV_EVENTS_H

#include "ctxcache/c/library.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- KV events (docs/EVENTS.md) ------------------------------------------------------------------------------
 * A manager can report the changes of its base block index in vLLM's KV event vocabulary, so that cluster routers
 * (NVIDIA Dynamo, llm-d) learn which replica holds a prefix: BlockStored when a publication makes blocks canonical
 * (one event per run of new blocks, root-first, with the parent and the tokens), BlockRemoved when eviction erases
 * them (leaf-first), AllBlocksCleared when events are enabled and on ctxc_manager_clear. A publication may name
 * its LoRA adapter and media items (ctxc_kv_event_keys_t): its BlockStored events carry them as vLLM's lora_name
 * and per-block extra_keys, so routers keep adapters and images apart. Block hashes are the low
 * 64 bits (`lo`) of the 128-bit block hashes. The events are drained (ctxc_kv_events_drain) for runtimes that ship
 * them their own way, or sent by a ZMQ publisher attached to the manager, one batch per manager call.
 *
 * `cache` names the manager: a ctxc_manager_t *, or the manager inside a ctxc_coordinator_t * or a
 * ctxc_sim_engine_t * (anything else: CTXC_E_INVALID_HANDLE). Every call follows that object's single-writer
 * contract. */
enum { CTXC_KV_EVENT_BLOCK_STORED = 0, CTXC_KV_EVENT_BLOCK_REMOVED = 1, CTXC_KV_EVENT_ALL_BLOCKS_CLEARED = 2 };
enum { CTXC_KV_EXTRA_KEY_LORA_NAME = 0, CTXC_KV_EXTRA_KEY_MEDIA = 1 };
enum { CTXC_KV_MEDIUM_DEVICE = 0, CTXC_KV_MEDIUM_HOST = 1 };

/* One of a stored block's extra keys (vLLM's extra_keys, untagged): the LoRA adapter's name, or a media item
 * overlapping the block as (identifier, offset). A block's keys are its adapter first, then its media items in
 * prompt order. */
typedef struct ctxc_kv_event_extra_key {
    uint32_t block; /* which of the event's blocks: 0 = the first listed */
    int32_t kind;   /* CTXC_KV_EXTRA_KEY_* */
    const char *text; /* the adapter's name or the media identifier: text_length bytes, not NUL-terminated */
    size_t text_length;
    int64_t offset; /* MEDIA: the item's first token minus the block's first token (negative: it began earlier) */
} ctxc_kv_event_extra_key_t;

typedef struct ctxc_kv_event {
    int32_t type; /* CTXC_KV_EVENT_* */
    int32_t has_parent; /* BlockStored: 1 when parent_block_hash names the block before the first listed one */
    uint64_t parent_block_hash;
    const uint64_t *block_hashes; /* root-first for BlockStored, leaf-first for BlockRemoved */
    size_t block_hash_count;
    const int32_t *token_ids; /* BlockStored: block_size tokens per listed block */
    size_t token_count;
    const char *lora_name; /* BlockStored: the LoRA adapter's name (lora_name_length bytes); length 0 = none */
    size_t lora_name_length;
    const ctxc_kv_event_extra_key_t *extra_keys; /* BlockStored: in block order; count 0 = no block has any */
    size_t extra_key_count;
} ctxc_kv_event_t;

/* A media item of a prompt, as a publication's events name it (vLLM's mm identifier and placeholder range). */
typedef struct ctxc_kv_event_media {
    const char *identifier; /* identifier_length > 0 bytes; ctxcache's runtime uses 64 hex digits, the shape
                               vLLM gives its own and Dynamo's router requires */
    size_t identifier_length;
    int64_t first_token; /* prompt position of its first placeholder token, >= 0 */
    int64_t token_count; /* > 0 */
} ctxc_kv_event_media_t;

/* What a publication's BlockStored events say beyond the tokens: lora_name, and per block the extra keys the
 * adapter and the media items give it. Read only while events are on; a malformed one is CTXC_E_CONTRACT. */
typedef struct ctxc_kv_event_keys {
    uint32_t struct_size;
    uint32_t reserved;
    const char *lora_name; /* lora_name_length bytes; 0 = the base model */
    size_t lora_name_length;
    const ctxc_kv_event_media_t *media; /* media_count items, sorted by first_token, not overlapping */
    size_t media_count;
} ctxc_kv_event_keys_t;

CTXC_API void ctxc_kv_event_keys_init(ctxc_kv_event_keys_t *keys);

typedef struct ctxc_kv_event_publisher ctxc_kv_event_publisher_t;

typedef struct ctxc_kv_event_publisher_options {
    uint32_t struct_size;
    int32_t data_parallel_rank; /* -1 (default): none, nil on the wire; r >= 0 also adds r to a tcp port */
    const char *endpoint; /* PUB endpoint (default: tcp port 5557 on every interface, vLLM's default); one with
                             a "*" or "::" host, or ipc or inproc, binds; any other connects (vLLM's rule) */
    const char *replay_endpoint; /* NULL or "" (default): no replay; else a ROUTER that binds there */
    const char *topic; /* default ""; llm-d expects "kv@<pod>@<model>" */
    const char *medium; /* default "GPU" */
    uint64_t buffer_steps; /* batches kept for replay (default 10000) */
    uint64_t max_queued_batches; /* batches waiting to be sent; beyond, the oldest is dropped (default 10000) */
    int32_t send_high_water_mark; /* ZMQ_SNDHWM (default 100000) */
    int32_t array_encoding; /* 1: events as positional arrays (vLLM < 0.24 consumers); 0 (default): tagged maps */
    int32_t has_first_sequence; /* 1: the first batch gets first_sequence; 0 (default): microseconds since the
                                   Unix epoch, so that a restarted publisher continues above its old numbers */
    int32_t reserved;
    uint64_t first_sequence;
    int32_t wait_for_subscriber_ms; /* 0 (default): send at once; > 0: hold every batch until the first
                                       subscription arrives, at most this long after create (ZMQ's slow joiner
                                       loses what is sent before a subscriber's connection completes) */
    int32_t linger_ms; /* 0 (default); > 0: destroy keeps the replay socket serving until this long after the
                          last batch was sent, so a router that noticed a gap can still fetch it */
} ctxc_kv_event_publisher_options_t;

typedef struct ctxc_kv_event_publisher_stats {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t accepted_batches; /* batches handed over by a manager (each got a sequence number) */
    uint64_t sent_batches;
    uint64_t dropped_batches; /* dropped from the full queue, refused by ZMQ, or received after destroy */
    uint64_t queued_batches;
    uint64_t next_sequence;
    uint64_t replay_requests;
    uint64_t subscriptions; /* subscribe messages seen (one per topic per subscriber) */
    int32_t holding;        /* 1 while waiting for the first subscriber: batches accepted now are held */
    int32_t reserved2;
} ctxc_kv_event_publisher_stats_t;

/* Turn the event stream on; the first event is AllBlocksCleared. CTXC_E_CONTRACT when it is already on or when
 * the manager already holds cached blocks (enable it before the first publication). Undrained events beyond
 * max_pending_events (0: 1048576) at the end of a call are dropped (counted as lost) and replaced by one
 * AllBlocksCleared: a consumer then under-reports this cache, never over-reports it. */
CTXC_API ctxc_status_t ctxc_kv_events_enable(void *cache, size_t max_pending_events);
/* Turn it off: pending events are dropped and a publisher is detached. Idempotent. */
CTXC_API ctxc_status_t ctxc_kv_events_disable(void *cache);
/* Take the pending events: *out_events (*out_count of them) and the arrays they point into stay valid until the
 * next drain on this cache or its destruction. *out_block_size (optional) = the page size. With a publisher
 * attached, nothing is pending. */
CTXC_API ctxc_status_t ctxc_kv_events_drain(void *cache, const ctxc_kv_event_t **out_events, size_t *out_count,
                                            int32_t *out_block_size);
/* Where the last drain's events' blocks live, one CTXC_KV_MEDIUM_* per event in the drain's order (vLLM's
 * "medium": a manager's own events are DEVICE, a host tier's HOST; a publisher writes "GPU" and "CPU"):
 * *out_media (*out_count entries) stays valid as the drain's events do. */
CTXC_API ctxc_status_t ctxc_kv_events_drained_media(const void *cache, const uint8_t **out_media, size_t *out_count);
/* Each optional: whether events are on, how many wait for a drain, how many were lost to the pending limit. */
CTXC_API ctxc_status_t ctxc_kv_events_status(const void *cache, int32_t *out_enabled, size_t *out_pending,
                                             uint64_t *out_lost);
/* Send each later call's events through `publisher` (NULL detaches: events wait for a drain again); pending
 * events go to it now. Events must be on (CTXC_E_CONTRACT). The cache keeps the publisher alive while attached;
 * after ctxc_kv_event_publisher_destroy it only counts what it drops. */
CTXC_API ctxc_status_t ctxc_kv_events_attach_publisher(void *cache, ctxc_kv_event_publisher_t *publisher);

/* 1 when this library was built with the ZMQ publisher (libzmq, msgpack-cxx), else 0. */
CTXC_API int32_t ctxc_kv_event_publisher_available(void);
CTXC_API void ctxc_kv_event_publisher_options_init(ctxc_kv_event_publisher_options_t *options);
/* Bind or connect the sockets and start the sender thread. CTXC_E_UNSUPPORTED without the publisher in this
 * build; CTXC_E_CONTRACT when ZMQ refuses an endpoint (in use, malformed) or a rank cannot offset it. A manager
 * call never waits for the network: batches go through a bounded queue to the sender thread. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_create(const ctxc_kv_event_publisher_options_t *options,
                                                      ctxc_kv_event_publisher_t **out_publisher);
/* Send what is queued or held (ZMQ lingers at most a second), serve replay for the linger, stop, close the
 * sockets: blocks for at most linger_ms plus a second. NULL is a no-op. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_destroy(ctxc_kv_event_publisher_t *publisher);
CTXC_API ctxc_status_t ctxc_kv_event_publisher_stats(const ctxc_kv_event_publisher_t *publisher,
                                                     ctxc_kv_event_publisher_stats_t *out_stats);
/* Wait up to timeout_ms for the queue to empty; *out_empty (optional) = 1 when it did. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_flush(ctxc_kv_event_publisher_t *publisher, int32_t timeout_ms,
                                                     int32_t *out_empty);
/* Wait up to timeout_ms for a subscriber (its subscription reached the XPUB socket, so what is sent from now on
 * reaches it); *out_subscribed (optional) = 1 when one has subscribed. Call it in slices to stay interruptible. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_wait_for_subscriber(ctxc_kv_event_publisher_t *publisher,
                                                                   int32_t timeout_ms, int32_t *out_subscribed);
/* The msgpack payload the publisher sends for these events (a 3-frame message's last frame), for tests and for
 * shipping events another way: two-call pattern into out_bytes. A stored event's extra keys must be in block
 * order, each naming one of its blocks (else CTXC_E_INVALID_ARGUMENT). CTXC_E_UNSUPPORTED without the
 * publisher. */
CTXC_API ctxc_status_t ctxc_kv_events_encode(const ctxc_kv_event_t *events, size_t count, int32_t block_size,
                                             double timestamp, int32_t data_parallel_rank, const char *medium,
                                             int32_t array_encoding, uint8_t *out_bytes, size_t out_capacity,
                                             size_t *out_size);
/* The same with each event's medium (media[i], a CTXC_KV_MEDIUM_* value, for events[i]; NULL: every event on the
 * device, as ctxc_kv_events_encode): a device event carries `medium`, a host tier's "CPU". Events drained with
 * ctxc_kv_events_drain and their ctxc_kv_events_drained_media encode exactly as the publisher would send them. A
 * value outside CTXC_KV_MEDIUM_*: CTXC_E_INVALID_ARGUMENT. */
CTXC_API ctxc_status_t ctxc_kv_events_encode_media(const ctxc_kv_event_t *events, const uint8_t *media, size_t count,
                                                   int32_t block_size, double timestamp, int32_t data_parallel_rank,
                                                   const char *medium, int32_t array_encoding, uint8_t *out_bytes,
                                                   size_t out_capacity, size_t *out_size);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_KV_EVENTS_H */
