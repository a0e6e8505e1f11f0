//! The stream writer and reader and the unaligned positional calls, on both
//! backends: round trips of odd-sized appends through small buffers with
//! flushes in the middle, the async traits, bounded memory, durability
//! through a fresh handle after `sync`, unaligned read-modify-write against a
//! model, and errors in the middle of a stream (a file that refuses writes
//! everywhere; a full tmpfs where the test runs as root), and the async
//! traits on tokio, where only completions wake the task. Every test runs on
//! its own thread under a watchdog, so a lost wake-up fails instead of hanging.
//!
//! Files live in cargo's per-test temporary directory, on a filesystem that
//! supports O_DIRECT. io_uring runs skip with a printed reason where the
//! kernel refuses io_uring.

mod common;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;
use tailguard::{
    BackendChoice, IoClass, OpenOptions, ReaderOptions, Scheduler, StreamReader, StreamWriter,
    WriterOptions,
};

/// How long any one test may take before it counts as hung.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `test` on its own thread and fails if it takes longer than
/// [`WATCHDOG`], so that a lost wake-up fails the run instead of hanging it.
fn watchdog(test: impl FnOnce() + Send + 'static) {
    common::watched(WATCHDOG, test);
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("stream-tests", name)
}

/// A scheduler on each backend this machine offers.
fn schedulers() -> Vec<(BackendChoice, Scheduler)> {
    common::schedulers([BackendChoice::Threads, BackendChoice::IoUring])
}

fn create(scheduler: &Scheduler, path: &Path) -> tailguard::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(scheduler, path)
        .unwrap()
}

/// Runs `body` under the [`watchdog`] once on each backend, with that
/// backend's scheduler, a class and a scratch file path both named `name`;
/// removes the file after each turn.
fn on_each_backend(name: &'static str, body: fn(BackendChoice, &Scheduler, &IoClass, &Path)) {
    watchdog(move || {
        for (choice, scheduler) in schedulers() {
            let class = scheduler.add_class(name, 100).unwrap();
            let path = scratch(&format!("{name}-{choice:?}"));
            body(choice, &scheduler, &class, &path);
            std::fs::remove_file(&path).unwrap();
        }
    });
}

/// Deterministic bytes: a xorshift stream from `seed`.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Chunk lengths that cross buffer boundaries in every way: 1 byte, odd
/// sizes, exactly a block, more than a buffer.
const CHUNKS: [usize; 9] = [1, 7, 4096, 511, 20_000, 3, 8192, 12_345, 100];

const SMALL: WriterOptions = WriterOptions {
    buffer_bytes: 8192,
    buffers_in_flight: 2,
};

#[test]
fn appends_of_any_length_read_back_exactly_with_flushes_between() {
    on_each_backend("log", |choice, scheduler, class, path| {
        let mut writer = StreamWriter::new(create(scheduler, path), class, SMALL);
        let mut expected = Vec::new();
        for (round, length) in CHUNKS.iter().cycle().take(40).enumerate() {
            let chunk = bytes(*length, round as u64);
            writer.write_all(&chunk).unwrap();
            expected.extend_from_slice(&chunk);
            // What the writer says is written is in the file already.
            let written = writer.written_len() as usize;
            assert!(written <= expected.len());
            let contents = std::fs::read(path).unwrap();
            assert_eq!(contents[..written], expected[..written], "{choice:?}");
            if round % 7 == 3 {
                // A flush in the middle writes the padded tail, which the
                // next appends rewrite: the file holds the data, then zeros
                // to the end of the block.
                writer.flush().unwrap();
                let contents = std::fs::read(path).unwrap();
                assert_eq!(contents[..expected.len()], expected, "{choice:?}");
                assert!(contents.len() < expected.len() + 4096);
                assert!(contents[expected.len()..].iter().all(|byte| *byte == 0));
                if round % 2 == 1 {
                    writer.sync().unwrap();
                    assert_eq!(std::fs::read(path).unwrap(), expected, "sync truncates");
                }
            }
        }
        assert_eq!(writer.logical_len(), expected.len() as u64);
        writer.flush().unwrap();
        assert_eq!(writer.written_len(), expected.len() as u64, "all written");
        assert!(
            writer.buffers_allocated() <= SMALL.buffers_in_flight + 1,
            "memory is bounded: {} buffers",
            writer.buffers_allocated()
        );
        writer.close().unwrap();
        assert!(writer.write(b"late").is_err(), "a closed writer refuses");
        drop(writer);
        assert_eq!(std::fs::read(path).unwrap(), expected, "{choice:?}");

        let file = scheduler.open(path).unwrap();
        let options = ReaderOptions {
            buffer_bytes: 4096,
            read_ahead_buffers: 3,
        };
        let mut reader = StreamReader::new(file, class, options.clone());
        let mut read_back = Vec::new();
        let mut piece = [0u8; 777];
        loop {
            let read = reader.read(&mut piece).unwrap();
            if read == 0 {
                break;
            }
            read_back.extend_from_slice(&piece[..read]);
        }
        assert_eq!(read_back, expected, "{choice:?}: the reader");
        for start in [1u64, 4095, 4096, 50_001] {
            let file = scheduler.open(path).unwrap();
            let mut reader = StreamReader::starting_at(file, class, options.clone(), start);
            let mut tail = Vec::new();
            reader.read_to_end(&mut tail).unwrap();
            assert_eq!(tail, expected[start as usize..], "from {start}");
            assert_eq!(reader.position(), expected.len() as u64);
        }
    });
}

/// Writes everything through the `futures-io` trait itself.
async fn write_through_trait(writer: &mut StreamWriter, mut data: &[u8]) -> io::Result<()> {
    use futures_io::AsyncWrite;
    while !data.is_empty() {
        let written =
            std::future::poll_fn(|context| Pin::new(&mut *writer).poll_write(context, data))
                .await?;
        data = &data[written..];
    }
    std::future::poll_fn(|context| Pin::new(&mut *writer).poll_flush(context)).await
}

#[test]
fn the_async_traits_stream_the_same_bytes() {
    on_each_backend("async", |choice, scheduler, class, path| {
        let data = bytes(150_001, 9);
        let mut writer = StreamWriter::new(create(scheduler, path), class, SMALL);
        let read_back = scheduler.block_on(async {
            write_through_trait(&mut writer, &data[..70_000]).await?;
            writer.write_all_async(&data[70_000..]).await?;
            writer.sync_async().await?;
            writer.close_async().await?;
            let file = writer.file().clone();
            let mut reader = StreamReader::new(file, class, ReaderOptions::default());
            let mut read_back = Vec::new();
            let mut piece = vec![0u8; 10_000];
            loop {
                use futures_io::AsyncRead;
                let read = std::future::poll_fn(|context| {
                    Pin::new(&mut reader).poll_read(context, &mut piece)
                })
                .await?;
                if read == 0 {
                    break;
                }
                read_back.extend_from_slice(&piece[..read]);
            }
            io::Result::Ok(read_back)
        });
        assert_eq!(read_back.unwrap(), data, "{choice:?}");
    });
}

#[test]
fn the_async_traits_work_on_a_foreign_runtime() {
    on_each_backend("tokio", |choice, scheduler, class, path| {
        // On tokio nobody runs the engine but its own thread: every pending
        // write, sync and read must be woken by a completion, or this hangs.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let data = bytes(100_003, 11);
        let file = create(scheduler, path);
        let (expected, class_for_task) = (data.clone(), class.clone());
        let read_back = runtime.block_on(async move {
            let mut writer = StreamWriter::new(file, &class_for_task, SMALL);
            write_through_trait(&mut writer, &expected).await?;
            writer.sync_async().await?;
            writer.close_async().await?;
            let mut reader = StreamReader::new(
                writer.file().clone(),
                &class_for_task,
                ReaderOptions {
                    buffer_bytes: 4096,
                    read_ahead_buffers: 2,
                },
            );
            let mut read_back = Vec::new();
            let mut piece = vec![0u8; 5_000];
            loop {
                let read = reader.read_async(&mut piece).await?;
                if read == 0 {
                    break;
                }
                read_back.extend_from_slice(&piece[..read]);
            }
            io::Result::Ok(read_back)
        });
        assert_eq!(read_back.unwrap(), data, "{choice:?}");
    });
}

#[test]
fn after_sync_the_data_reads_back_through_a_fresh_handle() {
    on_each_backend("durable", |choice, scheduler, class, path| {
        let mut writer = StreamWriter::new(create(scheduler, path), class, SMALL);
        let data = bytes(30_001, 3);
        writer.write_all(&data).unwrap();
        writer.sync().unwrap();
        // Not closed: what `sync` made durable must stand on its own, length
        // included. A fresh O_DIRECT handle on a fresh scheduler reads the
        // device, not this process's page cache.
        let fresh = Scheduler::builder().backend(choice).build().unwrap();
        let fresh_class = fresh.add_class("check", 1).unwrap();
        let file = fresh.open(path).unwrap();
        assert_eq!(file.std_file().metadata().unwrap().len(), data.len() as u64);
        let mut read_back = Vec::new();
        StreamReader::new(file, &fresh_class, ReaderOptions::default())
            .read_to_end(&mut read_back)
            .unwrap();
        assert_eq!(read_back, data, "{choice:?}");
        // Appends after the sync go on from the padded tail.
        writer.write_all(b"more").unwrap();
        writer.sync().unwrap();
        let mut expected = data.clone();
        expected.extend_from_slice(b"more");
        assert_eq!(std::fs::read(path).unwrap(), expected);
        drop(writer);
    });
}

#[test]
fn a_writer_appends_to_an_existing_file_at_any_offset() {
    on_each_backend("append", |choice, scheduler, class, path| {
        let initial = bytes(20_000, 21);
        for offset in [10_001u64, 8192, 20_000, 0] {
            std::fs::write(path, &initial).unwrap();
            let file = scheduler.open(path).unwrap();
            let mut writer = StreamWriter::appending(file, class, SMALL, offset).unwrap();
            assert_eq!(writer.logical_len(), offset);
            let more = bytes(9_000, offset);
            writer.write_all(&more).unwrap();
            writer.close().unwrap();
            let mut expected = initial[..offset as usize].to_vec();
            expected.extend_from_slice(&more);
            assert_eq!(
                std::fs::read(path).unwrap(),
                expected,
                "{choice:?} at {offset}"
            );
        }
        // `sync` alone (no `close`) cuts off the old bytes past what was
        // appended: the file's length is durable with it.
        std::fs::write(path, bytes(20_000, 3)).unwrap();
        let file = scheduler.open(path).unwrap();
        let mut writer = StreamWriter::appending(file, class, SMALL, 8192).unwrap();
        writer.write_all(&bytes(4096, 4)).unwrap();
        writer.sync().unwrap();
        let length = std::fs::metadata(path).unwrap().len();
        assert_eq!(length, 12_288, "{choice:?}: the length after sync");
        drop(writer);

        let before = std::fs::read(path).unwrap();
        let file = scheduler.open(path).unwrap();
        let error = StreamWriter::appending(file, class, SMALL, 1 << 20).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
        assert_eq!(
            std::fs::read(path).unwrap(),
            before,
            "{choice:?}: a writer that failed to start leaves the file as it was"
        );
    });
}

#[test]
fn unaligned_positional_writes_and_reads_match_a_model() {
    on_each_backend("patch", |choice, scheduler, class, path| {
        let initial = bytes(10_000, 5);
        std::fs::write(path, &initial).unwrap();
        let file = scheduler.open(path).unwrap();
        let mut model = initial.clone();
        let patches = [
            (3u64, 10usize),
            (4090, 20),
            (4096, 4096),
            (9_990, 30), // extends the file past its end
            (20_000, 5), // leaves a hole of zeros
            (1, 1),
        ];
        for (index, (offset, length)) in patches.into_iter().enumerate() {
            let patch = bytes(length, 100 + index as u64);
            scheduler
                .block_on(file.write_at_unaligned(class, &patch, offset))
                .unwrap();
            let end = offset as usize + length;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[offset as usize..end].copy_from_slice(&patch);
            assert_eq!(
                std::fs::read(path).unwrap(),
                model,
                "{choice:?} patch {index}"
            );
        }
        for (offset, length) in [(0u64, 1usize), (4095, 2), (7, 9_000), (19_998, 100)] {
            let mut out = vec![0u8; length];
            let read = scheduler
                .block_on(file.read_at_unaligned(class, &mut out, offset))
                .unwrap();
            let end = (offset as usize + length).min(model.len());
            assert_eq!(read, end - offset as usize, "short only at the end");
            assert_eq!(out[..read], model[offset as usize..end]);
            let exact = scheduler.block_on(file.read_exact_at_unaligned(class, &mut out, offset));
            match exact {
                Ok(()) => assert_eq!(read, length),
                Err(error) => {
                    assert!(read < length, "{error}");
                    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
                }
            }
        }
    });
}

/// Writes until a call fails; returns the error and checks that every later
/// call fails too and says the stream failed earlier.
fn write_until_error(writer: &mut StreamWriter, total_bytes: usize) -> io::Error {
    let chunk = bytes(3_000, 1);
    let mut written = 0;
    let error = loop {
        if let Err(error) = writer.write_all(&chunk) {
            break error;
        }
        written += chunk.len();
        if written >= total_bytes {
            match writer.flush() {
                Err(error) => break error,
                Ok(()) => panic!("{total_bytes} bytes went through without an error"),
            }
        }
    };
    for later in [
        writer.write(b"x").err(),
        writer.flush().err(),
        writer.sync().err(),
        writer.close().err(),
    ] {
        let later = later.expect("the error is sticky");
        assert!(later.to_string().contains("failed earlier"), "{later}");
        assert_eq!(later.kind(), error.kind());
        assert_eq!(
            tailguard::os_error_code(&later),
            tailguard::os_error_code(&error),
            "the errno survives every report: {later}"
        );
    }
    error
}

#[test]
fn a_file_that_refuses_writes_fails_the_stream_and_the_error_sticks() {
    on_each_backend("refused", |_, scheduler, class, path| {
        std::fs::write(path, b"").unwrap();
        // Read-only: every write the stream hands over fails with EBADF, in
        // the background, after the call that filled the buffer returned Ok.
        let file = OpenOptions::new().read(true).open(scheduler, path).unwrap();
        let mut writer = StreamWriter::new(file, class, SMALL);
        let error = write_until_error(&mut writer, 100_000);
        assert_eq!(writer.written_len(), 0, "nothing was written");
        assert!(
            error
                .to_string()
                .contains("write of 8192 bytes at offset 0"),
            "the error names the write: {error}"
        );
        assert_eq!(
            tailguard::os_error_code(&error),
            Some(libc::EBADF),
            "{error}"
        );
        drop(writer);
    });
}

#[test]
fn a_full_device_in_the_middle_of_a_stream_is_reported() {
    watchdog(a_full_device_in_the_middle_of_a_stream_is_reported_body);
}

fn a_full_device_in_the_middle_of_a_stream_is_reported_body() {
    let Some(tmpfs) = common::Tmpfs::mount("stream-tests", "tmpfs", "256k") else {
        return;
    };
    let mount_point = &tmpfs.0;
    for (choice, scheduler) in schedulers() {
        let class = scheduler.add_class("full", 100).unwrap();
        let path = mount_point.join(format!("log-{choice:?}"));
        // tmpfs refuses O_DIRECT: the stream works on buffered files too.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .direct(false)
            .open(&scheduler, &path)
            .unwrap();
        let mut writer = StreamWriter::new(file, &class, SMALL);
        let error = write_until_error(&mut writer, 4 << 20);
        assert_eq!(error.kind(), io::ErrorKind::StorageFull, "{error}");
        assert_eq!(
            tailguard::os_error_code(&error),
            Some(libc::ENOSPC),
            "{error}"
        );
        drop(writer);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_read_error_in_a_stream_is_reported_and_sticks() {
    on_each_backend("unreadable", |choice, scheduler, class, path| {
        std::fs::write(path, bytes(10_000, 2)).unwrap();
        let file = OpenOptions::new()
            .read(false)
            .write(true)
            .open(scheduler, path)
            .unwrap();
        let mut reader = StreamReader::new(file, class, ReaderOptions::default());
        let mut out = [0u8; 100];
        let error = reader.read(&mut out).unwrap_err();
        assert!(error.to_string().contains("read of"), "{choice:?}: {error}");
        let later = reader.read(&mut out).unwrap_err();
        assert!(later.to_string().contains("failed earlier"), "{later}");
        for report in [&error, &later] {
            assert_eq!(
                tailguard::os_error_code(report),
                Some(libc::EBADF),
                "{choice:?}: {report}"
            );
        }
    });
}

/// Options far out of range are clamped, not a panic or a hang; an offset
/// past the largest file offset is an error from the read, not a panic.
#[test]
fn out_of_range_stream_options_are_clamped() {
    on_each_backend("clamped", |choice, scheduler, class, path| {
        let data = bytes(300_000, 9);
        std::fs::write(path, b"").unwrap();
        let file = scheduler.open(path).unwrap();
        let options = WriterOptions {
            buffer_bytes: 64 << 10,
            buffers_in_flight: usize::MAX,
        };
        let mut writer = StreamWriter::new(file, class, options);
        writer.write_all(&data).unwrap();
        writer.close().unwrap();
        assert_eq!(std::fs::read(path).unwrap(), data, "{choice:?}");

        let options = ReaderOptions {
            buffer_bytes: 4096,
            read_ahead_buffers: usize::MAX,
        };
        let file = scheduler.open(path).unwrap();
        let mut read = Vec::new();
        StreamReader::new(file, class, options.clone())
            .read_to_end(&mut read)
            .unwrap();
        assert_eq!(read, data, "{choice:?}");

        let file = scheduler.open(path).unwrap();
        let mut reader = StreamReader::starting_at(file, class, options, u64::MAX - 10);
        let error = reader.read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(
            error.kind(),
            io::ErrorKind::InvalidInput,
            "{choice:?}: {error}"
        );
    });
}

/// A sync dropped after its flush, while its fdatasync is still out, does
/// not stand in for the next one: bytes written after it are flushed by the
/// next sync.
#[test]
fn a_sync_after_a_dropped_one_flushes_what_came_since() {
    on_each_backend("dropped-sync", |choice, scheduler, class, path| {
        std::fs::write(path, b"").unwrap();
        let file = scheduler.open(path).unwrap();
        let mut writer = StreamWriter::new(file, class, SMALL);
        let first = bytes(100, 1);
        writer.write_all(&first).unwrap();
        {
            let mut sync = std::pin::pin!(writer.sync_async());
            let mut context = std::task::Context::from_waker(std::task::Waker::noop());
            // Poll until the flush is on disk (the fdatasync then goes out
            // in the same poll), or the whole sync is done.
            while std::future::Future::poll(sync.as_mut(), &mut context).is_pending()
                && std::fs::read(path).unwrap() != first
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let second = bytes(50, 2);
        writer.write_all(&second).unwrap();
        writer.sync().unwrap();
        let mut expected = first.clone();
        expected.extend_from_slice(&second);
        assert_eq!(std::fs::read(path).unwrap(), expected, "{choice:?}");
        writer.close().unwrap();
    });
}

#[test]
fn a_new_writer_over_a_longer_file_cuts_it_at_the_first_sync() {
    on_each_backend("longer", |choice, scheduler, class, path| {
        for appended in [8192usize, 5000] {
            std::fs::write(path, bytes(1 << 20, 9)).unwrap();
            // Opened without truncating: a log rewritten in place.
            let file = scheduler.open(path).unwrap();
            let mut writer = StreamWriter::new(file, class, SMALL);
            let data = bytes(appended, 10);
            writer.write_all(&data).unwrap();
            writer.sync().unwrap();
            assert_eq!(
                std::fs::read(path).unwrap(),
                data,
                "{choice:?}: after sync the file is what was appended"
            );
            drop(writer);
        }
    });
}

/// A writer whose first write fails while its next ones are held by a
/// stalled device: dropped, it waits for them, so that none lands after it
/// is gone (a dropped request is still carried out).
#[test]
fn a_failed_writer_dropped_waits_for_its_writes_in_flight() {
    use tailguard::backend::fault::{FaultInjector, FaultPlan, FaultRule, OpFilter};
    watchdog(|| {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let injector = FaultInjector::new(FaultPlan {
                seed: 1,
                rules: vec![
                    FaultRule::ErrorRange {
                        offsets: 0..4096,
                        ops: OpFilter::Writes,
                        errno: libc::EIO,
                    },
                    // Long enough that the drop comes while they are held.
                    FaultRule::Stall {
                        at_op: 2,
                        duration: Duration::from_secs(2),
                    },
                ],
            });
            let builder = Scheduler::builder().fault_injection(injector.clone());
            let Some(scheduler) = common::build_on(choice, builder) else {
                continue;
            };
            let class = scheduler.add_class("failed-drop", 100).unwrap();
            let path = scratch(&format!("failed-drop-{choice:?}"));
            let mut writer = StreamWriter::new(create(&scheduler, &path), &class, SMALL);
            let error = write_until_error(&mut writer, 1 << 20);
            assert_eq!(tailguard::os_error_code(&error), Some(libc::EIO), "{error}");
            drop(writer);
            let counts = injector.counts();
            assert_eq!(counts.ops_held_now, 0, "{choice:?}: {counts:?}");
            assert_eq!(
                counts.ops_completed, counts.ops_pushed,
                "{choice:?}: {counts:?}"
            );
            drop(scheduler);
            std::fs::remove_file(&path).unwrap();
        }
    });
}
