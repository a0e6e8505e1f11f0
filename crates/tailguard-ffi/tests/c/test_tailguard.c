/*
 * The C test suite of tailguard's C ABI: errors with their messages, blocking
 * and asynchronous I/O (callbacks, and a completion queue polled through its
 * eventfd) from several threads in two classes with a data-integrity check,
 * statistics and metrics, class removal, and shutdown with requests in
 * flight, also while other threads submit. Run under AddressSanitizer by
 * .ci/run too, for leaks and use-after-free across the boundary.
 *
 * Usage: test_tailguard DIRECTORY (where a scratch file is made and removed).
 * Prints "N passed, M failed" last; exits 1 on any failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tailguard.h"

#define BLOCK 4096
#define THREADS 4
#define BLOCKS_PER_THREAD 16

static int passed, failed;
static char path[4096];
static uint32_t open_mode;

#define CHECK(condition, ...)                                                 \
    do {                                                                      \
        if (!(condition)) {                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__,  \
                    #condition);                                              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, " (last error: %s)\n", tg_last_error());          \
            return 1;                                                         \
        }                                                                     \
    } while (0)

static void run(const char *name, int (*test)(void)) {
    if (test() == 0) {
        passed++;
        printf("ok %s\n", name);
    } else {
        failed++;
        printf("FAILED %s\n", name);
    }
    fflush(stdout);
}

/* The byte at `index` of block `block` written by `writer`, pass `pass`. */
static uint8_t pattern(int writer, int block, int pass, size_t index) {
    return (uint8_t)(writer * 131 + block * 31 + pass * 7 + index * 13 + 1);
}

static void fill(tg_buffer *buffer, int writer, int block, int pass) {
    uint8_t *data = tg_buffer_data(buffer);
    for (size_t i = 0; i < tg_buffer_length(buffer); i++) {
        data[i] = pattern(writer, block, pass, i);
    }
}

static int matches(tg_buffer *buffer, int writer, int block, int pass) {
    const uint8_t *data = tg_buffer_data(buffer);
    for (size_t i = 0; i < tg_buffer_length(buffer); i++) {
        if (data[i] != pattern(writer, block, pass, i)) {
            return 0;
        }
    }
    return 1;
}

struct setup {
    tg_scheduler *scheduler;
    tg_class *reads;
    tg_class *writes;
    tg_file *file;
};

static int open_setup(struct setup *setup, uint32_t backend) {
    tg_scheduler_options options;
    CHECK(tg_scheduler_options_init(&options, sizeof options) == 0, "init");
    options.backend = backend;
    CHECK(tg_scheduler_new(&options, &setup->scheduler) == 0, "scheduler");
    CHECK(tg_class_new(setup->scheduler, "reads", 200, &setup->reads) == 0, "class");
    CHECK(tg_class_new(setup->scheduler, "writes", 50, &setup->writes) == 0, "class");
    CHECK(tg_file_open(setup->scheduler, path, open_mode, &setup->file) == 0, "open %s", path);
    return 0;
}

static void close_setup(struct setup *setup) {
    tg_file_close(setup->file);
    tg_class_free(setup->reads);
    tg_class_free(setup->writes);
    tg_scheduler_free(setup->scheduler);
}

/* ---------------------------------------------------------------- errors */

static int test_errors_are_negative_errno_with_a_message(void) {
    tg_scheduler *scheduler = NULL;
    CHECK(tg_scheduler_new(NULL, &scheduler) == 0, "defaults");
    tg_class *class = NULL;
    CHECK(tg_class_new(scheduler, "c", 0, &class) == -EINVAL, "zero shares");
    CHECK(strstr(tg_last_error(), "shares") != NULL, "message: %s", tg_last_error());
    CHECK(class == NULL, "no handle on failure");
    CHECK(tg_class_new(scheduler, NULL, 1, &class) == -EINVAL, "NULL name");
    CHECK(strstr(tg_last_error(), "name") != NULL, "names the argument");
    tg_file *file = NULL;
    CHECK(tg_file_open(scheduler, "/nonexistent/tailguard", TG_OPEN_READ, &file) == -ENOENT,
          "missing file");
    CHECK(tg_file_open(scheduler, path, TG_OPEN_READ | 0x400, &file) == -EINVAL,
          "an unknown open flag");
    CHECK(strstr(tg_last_error(), "TG_OPEN_") != NULL, "names the fix: %s", tg_last_error());
    tg_scheduler_options options;
    tg_scheduler_options_init(&options, sizeof options);
    options.backend = 99;
    tg_scheduler *bad = NULL;
    CHECK(tg_scheduler_new(&options, &bad) == -EINVAL, "unknown backend");
    CHECK(strstr(tg_last_error(), "TG_BACKEND") != NULL, "names the fix: %s", tg_last_error());
    CHECK(tg_buffer_new(4096, 3) == NULL, "alignment not a power of two");

    CHECK(tg_class_new(scheduler, "c", 10, &class) == 0, "class");
    CHECK(tg_file_open(scheduler, path, open_mode, &file) == 0, "open");
    if ((open_mode & TG_OPEN_BUFFERED) == 0) {
        tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
        CHECK(tg_read(file, class, buffer, 1) == -EINVAL, "misaligned offset");
        CHECK(strstr(tg_last_error(), "align") != NULL, "says why: %s", tg_last_error());
        tg_buffer_free(buffer);
    }
    tg_notify neither = {0};
    CHECK(tg_fdatasync_async(file, class, &neither) == -EINVAL, "no callback, no queue");
    tg_file_close(file);
    tg_class_free(class);
    tg_scheduler_free(scheduler);
    return 0;
}

/* The options as a header of another version sees them. */
static int test_options_of_another_header_version(void) {
    /* An older header: a struct that ends before `profile_file`. The library
     * writes nothing past it and builds with its default for the rest. */
    size_t older = offsetof(tg_scheduler_options, profile_file);
    union {
        tg_scheduler_options options;
        unsigned char bytes[sizeof(tg_scheduler_options) + 16];
    } storage;
    memset(storage.bytes, 0xAB, sizeof storage.bytes);
    CHECK(tg_scheduler_options_init(&storage.options, older) == 0, "init of %zu", older);
    for (size_t i = older; i < sizeof storage.bytes; i++) {
        CHECK(storage.bytes[i] == 0xAB, "byte %zu past the struct was written", i);
    }
    CHECK(storage.options.size == older, "size %zu", storage.options.size);
    tg_scheduler *scheduler = NULL;
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == 0, "older options");
    tg_scheduler_free(scheduler);

    /* A newer header: fields past this library's struct, zero by default. */
    size_t newer = sizeof(tg_scheduler_options) + 16;
    memset(storage.bytes, 0xAB, sizeof storage.bytes);
    CHECK(tg_scheduler_options_init(&storage.options, newer) == 0, "init of %zu", newer);
    for (size_t i = sizeof(tg_scheduler_options); i < newer; i++) {
        CHECK(storage.bytes[i] == 0, "newer byte %zu is its default, zero", i);
    }
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == 0, "newer options at defaults");
    tg_scheduler_free(scheduler);
    storage.bytes[newer - 1] = 1;
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == -EINVAL, "an unknown field set");
    CHECK(strstr(tg_last_error(), "does not know") != NULL, "says why: %s", tg_last_error());

    /* This header's newest field: the engine thread parking at once. */
    CHECK(tg_scheduler_options_init(&storage.options, sizeof(tg_scheduler_options)) == 0, "init");
    CHECK(storage.options.engine_linger_us == 0, "the default linger reads 0");
    storage.options.engine_linger_us = TG_ENGINE_LINGER_OFF;
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == 0, "linger off");
    tg_scheduler_free(scheduler);

    /* A size no version has, or garbage where init never ran. */
    CHECK(tg_scheduler_options_init(&storage.options, 3) == -EINVAL, "size 3");
    CHECK(tg_scheduler_options_init(&storage.options, (size_t)1 << 40) == -EINVAL,
          "a size of 1 TiB is refused, not zeroed");
    storage.options.size = (size_t)1 << 40;
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == -EINVAL, "nor read");
    storage.options.size = sizeof(tg_scheduler_options) + 3;
    CHECK(tg_scheduler_new(&storage.options, &scheduler) == -EINVAL, "a misaligned size");
    CHECK(strstr(tg_last_error(), "sizeof options") != NULL, "names the fix: %s",
          tg_last_error());
    return 0;
}

/* -------------------------------------------- threads, blocking and async */

struct worker {
    struct setup *setup;
    int index;
    int result;
    atomic_int callbacks;
};

static void count_callback(void *user_data, int64_t result, tg_buffer *buffer) {
    struct worker *worker = user_data;
    /* The check happens in the worker; record failure as a huge count. */
    if (result != BLOCK || buffer == NULL) {
        atomic_fetch_add(&worker->callbacks, 1000000);
    }
    atomic_fetch_add(&worker->callbacks, 1);
}

/* Writes its blocks with blocking calls, syncs, reads them back and checks;
 * then rewrites them asynchronously through a queue polled via its
 * eventfd, and reads them back asynchronously with callbacks. */
static int worker_body(struct worker *worker) {
    struct setup *setup = worker->setup;
    const int me = worker->index;
    tg_buffer *buffers[BLOCKS_PER_THREAD];
    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        buffers[b] = tg_buffer_new(BLOCK, BLOCK);
        CHECK(buffers[b] != NULL, "buffer");
    }
    uint64_t base = (uint64_t)me * BLOCKS_PER_THREAD * BLOCK;

    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        fill(buffers[b], me, b, 0);
        int64_t written = tg_write(setup->file, setup->writes, buffers[b], base + b * BLOCK);
        CHECK(written == BLOCK, "write %lld", (long long)written);
    }
    CHECK(tg_fdatasync(setup->file, setup->writes) == 0, "fdatasync");
    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        memset(tg_buffer_data(buffers[b]), 0, BLOCK);
        int64_t read = tg_read(setup->file, setup->reads, buffers[b], base + b * BLOCK);
        CHECK(read == BLOCK, "read %lld", (long long)read);
        CHECK(matches(buffers[b], me, b, 0), "thread %d block %d pass 0 corrupt", me, b);
    }

    /* Pass 1: asynchronous writes, completions through a queue. */
    tg_queue *queue = tg_queue_new();
    CHECK(queue != NULL, "queue");
    tg_notify to_queue = {.callback = NULL, .queue = queue, .user_data = NULL};
    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        fill(buffers[b], me, b, 1);
        to_queue.user_data = (void *)(intptr_t)b;
        CHECK(tg_write_async(setup->file, setup->writes, buffers[b], base + b * BLOCK,
                             &to_queue) == 0,
              "write_async");
        buffers[b] = NULL; /* the library's until its completion */
    }
    int done = 0;
    while (done < BLOCKS_PER_THREAD) {
        struct pollfd ready = {.fd = tg_queue_fd(queue), .events = POLLIN};
        CHECK(poll(&ready, 1, 10000) == 1, "eventfd readable within 10 s");
        uint64_t count;
        CHECK(read(ready.fd, &count, sizeof count) == sizeof count, "eventfd read");
        tg_completion completions[8];
        int got;
        while ((got = tg_queue_poll(queue, completions, 8)) > 0) {
            for (int i = 0; i < got; i++) {
                int b = (int)(intptr_t)completions[i].user_data;
                CHECK(completions[i].result == BLOCK, "async write %lld",
                      (long long)completions[i].result);
                CHECK(buffers[b] == NULL, "block %d completed twice", b);
                buffers[b] = completions[i].buffer;
                done++;
            }
        }
        CHECK(got == 0, "poll %d", got);
    }
    tg_notify sync_to_queue = {.callback = NULL, .queue = queue, .user_data = &to_queue};
    CHECK(tg_fdatasync_async(setup->file, setup->writes, &sync_to_queue) == 0, "sync async");
    tg_completion synced;
    for (int tries = 0; tg_queue_poll(queue, &synced, 1) == 0; tries++) {
        CHECK(tries < 10000, "the sync's completion never came");
        usleep(1000);
    }
    CHECK(synced.result == 0 && synced.buffer == NULL && synced.user_data == &to_queue,
          "sync completion");
    tg_queue_free(queue);

    /* Asynchronous reads with callbacks; the buffers come back through them,
     * but they are the same pointers, so keep ours to check afterwards. */
    tg_notify to_callback = {.callback = count_callback, .queue = NULL, .user_data = worker};
    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        memset(tg_buffer_data(buffers[b]), 0, BLOCK);
        CHECK(tg_read_async(setup->file, setup->reads, buffers[b], base + b * BLOCK,
                            &to_callback) == 0,
              "read_async");
    }
    for (int tries = 0; atomic_load(&worker->callbacks) < BLOCKS_PER_THREAD; tries++) {
        CHECK(tries < 10000, "callbacks: %d", atomic_load(&worker->callbacks));
        usleep(1000);
    }
    CHECK(atomic_load(&worker->callbacks) == BLOCKS_PER_THREAD, "each callback once, all OK");
    for (int b = 0; b < BLOCKS_PER_THREAD; b++) {
        CHECK(matches(buffers[b], me, b, 1), "thread %d block %d pass 1 corrupt", me, b);
        tg_buffer_free(buffers[b]);
    }
    return 0;
}

static void *worker_thread(void *argument) {
    struct worker *worker = argument;
    worker->result = worker_body(worker);
    return NULL;
}

static int threads_in_two_classes(uint32_t backend) {
    struct setup setup;
    if (open_setup(&setup, backend) != 0) {
        return 1;
    }
    struct worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t].setup = &setup;
        workers[t].index = t;
        workers[t].result = 1;
        atomic_init(&workers[t].callbacks, 0);
        CHECK(pthread_create(&threads[t], NULL, worker_thread, &workers[t]) == 0, "thread");
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(workers[t].result == 0, "worker %d failed", t);
    }

    /* Every request is counted in its class. */
    tg_class_counters reads, writes;
    CHECK(tg_class_stats(setup.scheduler, "reads", &reads) == 0, "stats");
    CHECK(tg_class_stats(setup.scheduler, "writes", &writes) == 0, "stats");
    const uint64_t per_pass = (uint64_t)THREADS * BLOCKS_PER_THREAD;
    CHECK(reads.ops == 2 * per_pass, "reads.ops %llu", (unsigned long long)reads.ops);
    CHECK(reads.bytes == 2 * per_pass * BLOCK, "reads.bytes");
    /* Writes: two passes of blocks and two syncs per thread. */
    CHECK(writes.ops == 2 * per_pass + 2 * THREADS, "writes.ops %llu",
          (unsigned long long)writes.ops);
    CHECK(reads.errors == 0 && writes.errors == 0, "no errors");
    CHECK(reads.latency_ns_max >= reads.latency_ns_p50 && reads.latency_ns_p50 > 0, "latency");
    CHECK(tg_class_stats(setup.scheduler, "nope", &reads) == -ENOENT, "unknown class");

    char *metrics = tg_metrics_text(setup.scheduler);
    CHECK(metrics != NULL, "metrics");
    char expected[128];
    snprintf(expected, sizeof expected, "tailguard_class_operations_total{class=\"reads\"} %llu",
             (unsigned long long)(2 * per_pass));
    CHECK(strstr(metrics, expected) != NULL, "%s in the metrics", expected);
    CHECK(strstr(metrics, "tailguard_class_latency_seconds_bucket{") != NULL, "histograms");
    CHECK(strstr(metrics, "# EOF") != NULL, "OpenMetrics end");
    tg_string_free(metrics);
    char *json = tg_stats_json(setup.scheduler);
    CHECK(json != NULL && strstr(json, "\"classes\"") != NULL, "json");
    tg_string_free(json);
    close_setup(&setup);
    return 0;
}

static int test_threads_in_two_classes_with_the_thread_pool(void) {
    return threads_in_two_classes(TG_BACKEND_THREADS);
}

static int test_threads_in_two_classes_with_the_default_backend(void) {
    return threads_in_two_classes(TG_BACKEND_AUTO);
}

/* --------------------------------------------------- classes and shutdown */

static int test_classes_change_shares_and_are_removed(void) {
    struct setup setup;
    if (open_setup(&setup, TG_BACKEND_AUTO) != 0) {
        return 1;
    }
    CHECK(tg_class_set_shares(setup.writes, 1000) == 0, "shares");
    CHECK(tg_class_set_shares(setup.writes, 20000) == -EINVAL, "too many shares");
    CHECK(tg_class_set_rate_limit(setup.writes, 1 << 30, 100000, 0) == 0, "rate limit");
    CHECK(tg_class_set_rate_limit(setup.writes, 1, 0, UINT64_MAX) == -EINVAL, "burst too long");
    CHECK(tg_class_set_rate_limit(setup.writes, 0, 0, 0) == 0, "rate limit lifted");
    tg_class *extra = NULL;
    CHECK(tg_class_new(setup.scheduler, "extra", 5, &extra) == 0, "class");
    CHECK(tg_fdatasync(setup.file, extra) == 0, "sync in the extra class");
    CHECK(tg_class_remove(extra) == 0, "remove");
    tg_class_counters stats;
    CHECK(tg_class_stats(setup.scheduler, "extra", &stats) == 0 && stats.ops == 1,
          "a removed class keeps its counters");
    close_setup(&setup);
    return 0;
}

static atomic_int shutdown_callbacks;

static void shutdown_callback(void *user_data, int64_t result, tg_buffer *buffer) {
    (void)result;
    tg_buffer_free(buffer);
    atomic_fetch_add((atomic_int *)user_data, 1);
}

static int test_freeing_the_scheduler_delivers_every_completion(void) {
    struct setup setup;
    if (open_setup(&setup, TG_BACKEND_AUTO) != 0) {
        return 1;
    }
    atomic_init(&shutdown_callbacks, 0);
    tg_notify notify = {.callback = shutdown_callback, .queue = NULL,
                        .user_data = &shutdown_callbacks};
    enum { REQUESTS = 64 };
    for (int i = 0; i < REQUESTS; i++) {
        tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
        CHECK(tg_read_async(setup.file, setup.reads, buffer, (uint64_t)(i % 8) * BLOCK,
                            &notify) == 0,
              "read_async");
    }
    /* A queue freed with completions on their way: they are dropped. */
    tg_queue *queue = tg_queue_new();
    tg_notify to_queue = {.callback = NULL, .queue = queue, .user_data = NULL};
    for (int i = 0; i < 8; i++) {
        tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
        CHECK(tg_read_async(setup.file, setup.reads, buffer, 0, &to_queue) == 0, "async");
    }
    tg_queue_free(queue);
    tg_scheduler *scheduler = setup.scheduler;
    tg_scheduler_free(scheduler);
    CHECK(atomic_load(&shutdown_callbacks) == REQUESTS, "%d of %d callbacks",
          atomic_load(&shutdown_callbacks), REQUESTS);
    /* The file and classes outlive it: their requests are refused. */
    tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
    CHECK(tg_read(setup.file, setup.reads, buffer, 0) == -ESHUTDOWN, "after free");
    CHECK(tg_read_async(setup.file, setup.reads, buffer, 0, &notify) == -ESHUTDOWN,
          "async after free");
    tg_buffer_free(buffer);
    tg_file_close(setup.file);
    tg_class_free(setup.reads);
    tg_class_free(setup.writes);
    return 0;
}

/* Threads that submit until the scheduler is freed under them. */
struct racer {
    struct setup *setup;
    atomic_int *delivered;
    int accepted;
    int unexpected_errors;
};

static void *racer_thread(void *argument) {
    struct racer *racer = argument;
    tg_notify notify = {.callback = shutdown_callback, .queue = NULL,
                        .user_data = racer->delivered};
    for (;;) {
        tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
        int result = tg_read_async(racer->setup->file, racer->setup->reads, buffer, 0, &notify);
        if (result == 0) {
            racer->accepted++;
            continue;
        }
        tg_buffer_free(buffer);
        racer->unexpected_errors += result != -ESHUTDOWN;
        return NULL;
    }
}

static int test_freeing_the_scheduler_while_threads_submit_loses_nothing(void) {
    enum { ROUNDS = 20, RACERS = 3 };
    for (int round = 0; round < ROUNDS; round++) {
        struct setup setup;
        if (open_setup(&setup, TG_BACKEND_AUTO) != 0) {
            return 1;
        }
        atomic_int delivered;
        atomic_init(&delivered, 0);
        struct racer racers[RACERS];
        pthread_t threads[RACERS];
        for (int i = 0; i < RACERS; i++) {
            racers[i] = (struct racer){.setup = &setup, .delivered = &delivered};
            CHECK(pthread_create(&threads[i], NULL, racer_thread, &racers[i]) == 0, "thread");
        }
        usleep(1000 + round * 250);
        tg_scheduler_free(setup.scheduler);
        int accepted = 0, unexpected_errors = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(threads[i], NULL);
            accepted += racers[i].accepted;
            unexpected_errors += racers[i].unexpected_errors;
        }
        tg_file_close(setup.file);
        tg_class_free(setup.reads);
        tg_class_free(setup.writes);
        /* Every request the library accepted was delivered by the free. */
        CHECK(atomic_load(&delivered) == accepted, "round %d: %d of %d accepted delivered",
              round, atomic_load(&delivered), accepted);
        CHECK(unexpected_errors == 0, "round %d: refused with another error", round);
    }
    return 0;
}

static atomic_int cancel_callbacks, cancelled_callbacks, unexpected_results;

static void cancel_callback(void *user_data, int64_t result, tg_buffer *buffer) {
    (void)user_data;
    tg_buffer_free(buffer);
    if (result == -ECANCELED) {
        atomic_fetch_add(&cancelled_callbacks, 1);
    } else if (result != BLOCK) {
        atomic_fetch_add(&unexpected_results, 1);
    }
    atomic_fetch_add(&cancel_callbacks, 1);
}

static int test_cancelling_fails_the_queue_and_completes_each_request_once(void) {
    struct setup setup;
    if (open_setup(&setup, TG_BACKEND_AUTO) != 0) {
        return 1;
    }
    atomic_init(&cancel_callbacks, 0);
    atomic_init(&cancelled_callbacks, 0);
    atomic_init(&unexpected_results, 0);
    for (int block = 0; block < 8; block++) {
        tg_buffer *data = tg_buffer_new(BLOCK, BLOCK);
        fill(data, 9, block, 0);
        CHECK(tg_write(setup.file, setup.writes, data, (uint64_t)block * BLOCK) == BLOCK,
              "write");
        tg_buffer_free(data);
    }
    tg_notify notify = {.callback = cancel_callback, .queue = NULL, .user_data = NULL};
    enum { REQUESTS = 256 };
    for (int i = 0; i < REQUESTS; i++) {
        tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
        CHECK(tg_read_async(setup.file, setup.reads, buffer, (uint64_t)(i % 8) * BLOCK,
                            &notify) == 0,
              "read_async");
    }
    int64_t cancelled = tg_scheduler_cancel_pending(setup.scheduler);
    CHECK(cancelled >= 0 && cancelled <= REQUESTS, "cancelled %lld", (long long)cancelled);
    /* The scheduler goes on serving. */
    tg_buffer *buffer = tg_buffer_new(BLOCK, BLOCK);
    CHECK(tg_read(setup.file, setup.reads, buffer, 0) == BLOCK, "a read after the cancel");
    tg_buffer_free(buffer);
    CHECK(tg_scheduler_cancel_pending(NULL) == -EINVAL, "NULL");
    close_setup(&setup);
    /* Freeing delivered every completion: each once, served or cancelled. */
    CHECK(atomic_load(&cancel_callbacks) == REQUESTS, "%d of %d callbacks",
          atomic_load(&cancel_callbacks), REQUESTS);
    CHECK(atomic_load(&cancelled_callbacks) == cancelled, "%d cancelled callbacks, %lld counted",
          atomic_load(&cancelled_callbacks), (long long)cancelled);
    CHECK(atomic_load(&unexpected_results) == 0, "%d unexpected results",
          atomic_load(&unexpected_results));
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/tailguard-c-test-%d", argv[1], (int)getpid());
    /* O_DIRECT where the filesystem allows it (not on tmpfs). */
    tg_scheduler *probe_scheduler = NULL;
    tg_file *probe = NULL;
    tg_scheduler_new(NULL, &probe_scheduler);
    open_mode = TG_OPEN_READ | TG_OPEN_WRITE | TG_OPEN_CREATE | TG_OPEN_TRUNCATE;
    if (tg_file_open(probe_scheduler, path, open_mode, &probe) != 0) {
        printf("note: %s; using buffered I/O\n", tg_last_error());
        open_mode |= TG_OPEN_BUFFERED;
    }
    tg_file_close(probe);
    tg_scheduler_free(probe_scheduler);
    open_mode &= ~(uint32_t)TG_OPEN_TRUNCATE;

    run("errors_are_negative_errno_with_a_message", test_errors_are_negative_errno_with_a_message);
    run("options_of_another_header_version", test_options_of_another_header_version);
    run("threads_in_two_classes_with_the_thread_pool",
        test_threads_in_two_classes_with_the_thread_pool);
    run("threads_in_two_classes_with_the_default_backend",
        test_threads_in_two_classes_with_the_default_backend);
    run("classes_change_shares_and_are_removed", test_classes_change_shares_and_are_removed);
    run("freeing_the_scheduler_delivers_every_completion",
        test_freeing_the_scheduler_delivers_every_completion);
    run("freeing_the_scheduler_while_threads_submit_loses_nothing",
        test_freeing_the_scheduler_while_threads_submit_loses_nothing);
    run("cancelling_fails_the_queue_and_completes_each_request_once",
        test_cancelling_fails_the_queue_and_completes_each_request_once);
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
