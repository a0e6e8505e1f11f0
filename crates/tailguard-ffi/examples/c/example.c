/*
 * tailguard from C: a scheduler, a latency-sensitive class and a background
 * class, a file written in the background class and read back in the other,
 * one asynchronous read whose completion arrives through a queue's eventfd,
 * and the scheduler's metrics.
 *
 * Build and run (from the repository root):
 *   cargo build --release -p tailguard-ffi
 *   cc -I crates/tailguard-ffi/include crates/tailguard-ffi/examples/c/example.c \
 *      target/release/libtailguard_ffi.a -lpthread -ldl -lm -o example
 *   ./example /var/tmp/tailguard-example
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tailguard.h"

static int fail(const char *what) {
    fprintf(stderr, "%s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tailguard-example.data";
    tg_scheduler_options options;
    tg_scheduler_options_init(&options, sizeof options);
    options.latency_target_us = 2000;

    tg_scheduler *scheduler;
    tg_class *interactive, *background;
    tg_file *file;
    if (tg_scheduler_new(&options, &scheduler) != 0) return fail("scheduler");
    if (tg_class_new(scheduler, "interactive", 1000, &interactive) != 0) return fail("class");
    if (tg_class_new(scheduler, "background", 100, &background) != 0) return fail("class");
    uint32_t flags = TG_OPEN_READ | TG_OPEN_WRITE | TG_OPEN_CREATE;
    if (tg_file_open(scheduler, path, flags, &file) != 0) {
        /* tmpfs and overlayfs refuse O_DIRECT: the message says so. */
        fprintf(stderr, "%s; trying buffered I/O\n", tg_last_error());
        if (tg_file_open(scheduler, path, flags | TG_OPEN_BUFFERED, &file) != 0) {
            return fail("open");
        }
    }

    tg_buffer *buffer = tg_buffer_new(4096, 4096);
    memset(tg_buffer_data(buffer), 'x', tg_buffer_length(buffer));
    if (tg_write(file, background, buffer, 0) != 4096) return fail("write");
    if (tg_fdatasync(file, background) != 0) return fail("fdatasync");

    /* Asynchronous: the buffer is the library's until the completion. */
    tg_queue *queue = tg_queue_new();
    tg_notify notify = {.callback = NULL, .queue = queue, .user_data = NULL};
    if (tg_read_async(file, interactive, buffer, 0, &notify) != 0) return fail("read_async");
    struct pollfd ready = {.fd = tg_queue_fd(queue), .events = POLLIN};
    tg_completion completion;
    while (tg_queue_poll(queue, &completion, 1) == 0) {
        poll(&ready, 1, -1);
        uint64_t count;
        (void)!read(ready.fd, &count, sizeof count);
    }
    if (completion.result != 4096) return fail("read");
    buffer = completion.buffer;
    printf("read %lld bytes, first byte '%c'\n", (long long)completion.result,
           tg_buffer_data(buffer)[0]);

    char *metrics = tg_metrics_text(scheduler);
    printf("%s", metrics);
    tg_string_free(metrics);

    tg_buffer_free(buffer);
    tg_queue_free(queue);
    tg_file_close(file);
    tg_class_free(interactive);
    tg_class_free(background);
    tg_scheduler_free(scheduler);
    unlink(path);
    return 0;
}
