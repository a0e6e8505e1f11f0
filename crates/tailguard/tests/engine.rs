//! The engine end to end, on both backends: data integrity from many threads and
//! classes, tokio, the blocking API, error paths, dropped futures and shutdown.
//!
//! Files live in cargo's per-test temporary directory, which is on a real disk
//! that supports O_DIRECT. io_uring tests skip with a printed reason where the
//! kernel or a seccomp profile refuses io_uring.

mod common;
use common::{build_on, open_read_write, registered_paths};
use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tailguard::{AlignedBuffer, BackendChoice, BackendKind, OpenOptions, Scheduler};

const BLOCK: usize = 4096;

fn scratch(name: &str) -> PathBuf {
    common::scratch("engine-tests", name)
}

/// Opens (creating) a scratch file read-write with O_DIRECT through `scheduler`.
fn open_scratch(scheduler: &Scheduler, name: &str) -> (tailguard::File, PathBuf) {
    let path = scratch(name);
    (open_read_write(scheduler, &path), path)
}

/// A scheduler on `choice`, or `None` (with the reason printed) when this
/// machine refuses io_uring.
fn scheduler(choice: BackendChoice) -> Option<Scheduler> {
    build_on(choice, Scheduler::builder())
}

/// Every backend, io_uring three times: with waiters running the engine (a
/// shared ring), submitting each request on its own, and registered files;
/// with the engine thread alone (a single-issuer ring) submitting once per
/// turn; and with registered files off (plain descriptors).
fn backends() -> Vec<(BackendChoice, Scheduler)> {
    let builder = Scheduler::builder;
    [
        (
            BackendChoice::IoUring,
            builder().waiters_run_engine(true).eager_submit(true),
        ),
        (
            BackendChoice::IoUring,
            builder().waiters_run_engine(false).eager_submit(false),
        ),
        (BackendChoice::IoUring, builder().registered_files(0)),
        (BackendChoice::Threads, builder()),
    ]
    .into_iter()
    .filter_map(|(choice, builder)| build_on(choice, builder).map(|scheduler| (choice, scheduler)))
    .collect()
}

/// Block `index`'s content: its index and a salt in every 8 bytes.
fn pattern(index: u64, salt: u64) -> AlignedBuffer {
    let mut buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    for (word, chunk) in buffer.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(index * 1_000_003 + salt + word as u64).to_le_bytes());
    }
    buffer
}

#[test]
fn data_written_from_many_threads_and_classes_reads_back_intact() {
    for (choice, scheduler) in backends() {
        let expected_kind = match choice {
            BackendChoice::Threads => BackendKind::Threads,
            _ => BackendKind::IoUring,
        };
        assert_eq!(scheduler.backend(), expected_kind);
        let (file, path) = open_scratch(&scheduler, &format!("integrity-{choice:?}"));
        let file = Arc::new(file);
        let classes: Vec<_> = (0..3)
            .map(|index| {
                scheduler
                    .add_class(&format!("class{index}"), 100 * (index + 1))
                    .unwrap()
            })
            .collect();
        let threads = 6u64;
        let blocks_per_thread = 64u64;
        let completions = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..threads)
            .map(|thread| {
                let (file, class, completions) = (
                    file.clone(),
                    classes[thread as usize % classes.len()].clone(),
                    completions.clone(),
                );
                std::thread::spawn(move || {
                    // Submit everything first, then wait: many requests in flight.
                    let futures: Vec<_> = (0..blocks_per_thread)
                        .map(|block| {
                            let index = thread * blocks_per_thread + block;
                            file.write_at(&class, pattern(index, 7), index * BLOCK as u64)
                        })
                        .collect();
                    for future in futures {
                        let (result, _) = future.wait();
                        assert_eq!(result.unwrap(), BLOCK);
                        completions.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        file.fdatasync(&classes[0]).wait().unwrap();
        let total = threads * blocks_per_thread;
        assert_eq!(completions.load(Ordering::SeqCst) as u64, total);
        // One large read across everything: split into pieces and rejoined.
        let all = AlignedBuffer::new(total as usize * BLOCK, BLOCK).unwrap();
        let (result, all) = file.read_at(&classes[1], all, 0).wait();
        assert_eq!(result.unwrap(), total as usize * BLOCK);
        for index in 0..total {
            let start = index as usize * BLOCK;
            assert_eq!(
                &all[start..start + BLOCK],
                &pattern(index, 7)[..],
                "{choice:?}: block {index}"
            );
        }
        let stats = scheduler.stats().unwrap();
        let ops: u64 = stats.classes.iter().map(|class| class.ops).sum();
        assert_eq!(
            ops,
            total + 2,
            "every request counted once (writes, sync, read)"
        );
        let device = stats.device(&file.device().name).unwrap();
        assert_eq!(device.in_flight_pieces, 0);
        assert!(stats.class("class1").unwrap().latency_ns.len() == 1 + 2 * blocks_per_thread);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn futures_work_on_a_multi_threaded_tokio_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for (choice, scheduler) in backends() {
        let (file, path) = open_scratch(&scheduler, &format!("tokio-{choice:?}"));
        let file = Arc::new(file);
        let class = scheduler.add_class("tokio", 100).unwrap();
        runtime.block_on(async {
            let tasks: Vec<_> = (0..32u64)
                .map(|index| {
                    let (file, class) = (file.clone(), class.clone());
                    tokio::spawn(async move {
                        let (written, _) = file
                            .write_at(&class, pattern(index, 1), index * BLOCK as u64)
                            .await;
                        assert_eq!(written.unwrap(), BLOCK);
                        let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
                        let (read, buffer) =
                            file.read_at(&class, buffer, index * BLOCK as u64).await;
                        assert_eq!(read.unwrap(), BLOCK);
                        assert_eq!(&buffer[..], &pattern(index, 1)[..]);
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn misaligned_requests_fail_at_once_naming_the_alignment() {
    let scheduler = scheduler(BackendChoice::Threads).unwrap();
    let (file, path) = open_scratch(&scheduler, "misaligned");
    let class = scheduler.add_class("c", 1).unwrap();
    let offset_alignment = file.alignment().offset_bytes as u64;
    let (result, buffer) = file
        .read_at(
            &class,
            AlignedBuffer::new(BLOCK, BLOCK).unwrap(),
            offset_alignment + 1,
        )
        .wait();
    let error = result.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(
        error.to_string().contains(&offset_alignment.to_string()),
        "{error}"
    );
    assert_eq!(buffer.len(), BLOCK, "the buffer comes back");

    let odd = AlignedBuffer::new(BLOCK + 1, BLOCK).unwrap();
    let (result, _) = file.write_at(&class, odd, 0).wait();
    assert!(
        result.unwrap_err().to_string().contains("length"),
        "length named"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn errors_from_the_kernel_come_back_as_errors() {
    for (choice, scheduler) in backends() {
        let path = scratch(&format!("readonly-{choice:?}"));
        std::fs::write(&path, vec![0u8; BLOCK]).unwrap();
        // Opened read-only: a write fails in the kernel with EBADF.
        let file = OpenOptions::new()
            .read(true)
            .open(&scheduler, &path)
            .unwrap();
        let class = scheduler.add_class("c", 1).unwrap();
        let (result, _) = file.write_at(&class, pattern(0, 0), 0).wait();
        let error = result.unwrap_err();
        assert_eq!(
            tailguard::os_error_code(&error),
            Some(libc::EBADF),
            "{choice:?}"
        );
        // The message says which operation failed on which file, and the fix.
        let text = error.to_string();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            text.contains("write of") && text.contains(name) && text.contains("write(true)"),
            "{choice:?}: {text}"
        );
        // A read past the end is short, not an error.
        let buffer = AlignedBuffer::new(2 * BLOCK, BLOCK).unwrap();
        let (result, _) = file.read_at(&class, buffer, 0).wait();
        assert_eq!(
            result.unwrap(),
            BLOCK,
            "{choice:?}: short read reported as such"
        );
        let stats = scheduler.stats().unwrap();
        assert_eq!(stats.class("c").unwrap().errors, 1);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_filesystem_without_o_direct_gets_a_clear_error() {
    let scheduler = scheduler(BackendChoice::Threads).unwrap();
    let shm = PathBuf::from("/dev/shm");
    if !shm.is_dir() {
        println!("skipping: no /dev/shm");
        return;
    }
    let path = shm.join(format!("tailguard-direct-{}", std::process::id()));
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&scheduler, &path);
    let _ = std::fs::remove_file(&path);
    let error = match opened {
        Ok(file) => {
            // tmpfs supports O_DIRECT since Linux 6.6; the message itself is
            // unit-tested in scheduler.rs.
            println!(
                "skipping: {} accepts O_DIRECT on this kernel",
                file.device().name
            );
            return;
        }
        Err(error) => error,
    };
    assert!(error.to_string().contains("O_DIRECT"), "{error}");
    assert!(
        error.to_string().contains("direct(false)"),
        "names the fix: {error}"
    );
}

#[test]
fn dropped_futures_still_complete_and_shutdown_drains() {
    for (choice, scheduler) in backends() {
        let (file, path) = open_scratch(&scheduler, &format!("dropped-{choice:?}"));
        let class = scheduler.add_class("c", 1).unwrap();
        for index in 0..200u64 {
            // Dropped at once: the engine keeps the buffer until the kernel is done.
            drop(file.write_at(&class, pattern(index, 3), index * BLOCK as u64));
        }
        let last = file.fdatasync(&class);
        let other_handle = scheduler.clone();
        other_handle.shutdown();
        // Accepted before shutdown: completed, not lost.
        last.wait().unwrap();
        let (result, _) = file.write_at(&class, pattern(0, 0), 0).wait();
        assert!(
            result.unwrap_err().to_string().contains("shut down"),
            "{choice:?}"
        );
        assert!(
            scheduler.stats().is_err(),
            "stats after shutdown is an error"
        );
        // Every dropped write reached the disk.
        let data = std::fs::read(&path).unwrap();
        for index in [0usize, 99, 199] {
            assert_eq!(
                &data[index * BLOCK..(index + 1) * BLOCK],
                &pattern(index as u64, 3)[..]
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn nops_go_through_a_dispatcher_and_classes_change_at_run_time() {
    let scheduler = scheduler(BackendChoice::Threads).unwrap();
    let class = scheduler.add_class("nop", 10).unwrap();
    let futures: Vec<_> = (0..1000).map(|_| scheduler.nop(&class)).collect();
    for future in futures {
        future.wait().unwrap();
    }
    class.set_shares(500).unwrap();
    assert!(class.set_shares(0).is_err());
    assert!(scheduler.add_class("nop", 1).is_err(), "names are unique");
    let stats = scheduler.stats().unwrap();
    assert_eq!(stats.class("nop").unwrap().ops, 1000);
    assert_eq!(stats.class("nop").unwrap().shares, 500);
    assert_eq!(stats.device("null").unwrap().ops, 1000);
    let ids: HashSet<_> = stats
        .devices
        .iter()
        .map(|device| device.name.clone())
        .collect();
    assert!(ids.contains("null"));
}

#[test]
fn forcing_threads_through_the_environment_selects_the_fallback() {
    // The environment override is read by the backend chooser; a child process
    // keeps this test from changing the environment of the others.
    if std::env::var("TAILGUARD_TEST_CHILD").is_ok() {
        let scheduler = Scheduler::builder().build().unwrap();
        assert_eq!(scheduler.backend(), BackendKind::Threads);
        return;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "forcing_threads_through_the_environment_selects_the_fallback",
        ])
        .env("TAILGUARD_TEST_CHILD", "1")
        .env("TAILGUARD_BACKEND", "threads")
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn turning_registered_files_off_through_the_environment() {
    // As above: the variable is read when a backend is opened, so children
    // run with it. `off` registers nothing; a value that means nothing fails.
    if let Ok(setting) = std::env::var("TAILGUARD_TEST_REGISTERED_FILES") {
        let built = Scheduler::builder().backend(BackendChoice::IoUring).build();
        if setting == "bogus" {
            let error = built.unwrap_err();
            assert!(
                error.to_string().contains("TAILGUARD_REGISTERED_FILES"),
                "{error}"
            );
            return;
        }
        let Ok(scheduler) = built else {
            println!("skipping: no io_uring here");
            return;
        };
        let (file, path) = open_scratch(&scheduler, "registered-env");
        let class = scheduler.add_class("c", 1).unwrap();
        write_and_check(&file, &class, 0, 29);
        assert_ne!(registered_now(&path), Some(true), "off registers nothing");
        drop(file);
        std::fs::remove_file(&path).unwrap();
        return;
    }
    for setting in ["off", "bogus"] {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "turning_registered_files_off_through_the_environment",
            ])
            .env("TAILGUARD_TEST_REGISTERED_FILES", setting)
            .env("TAILGUARD_REGISTERED_FILES", setting)
            .status()
            .unwrap();
        assert!(status.success(), "{setting}");
    }
}

#[test]
fn a_full_filesystem_reports_enospc() {
    let Some(mount) = common::Tmpfs::mount("engine-tests", "enospc-mount", "64k") else {
        return;
    };
    for (choice, scheduler) in backends() {
        let path = mount.0.join(format!("full-{choice:?}"));
        // tmpfs takes O_DIRECT since Linux 6.6; older kernels need buffered I/O.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&scheduler, &path)
            .or_else(|_| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .direct(false)
                    .open(&scheduler, &path)
            })
            .unwrap();
        let class = scheduler.add_class("fill", 1).unwrap();
        let big = AlignedBuffer::new(256 * 1024, BLOCK).unwrap();
        let (result, _) = file.write_at(&class, big, 0).wait();
        // Either the first piece already fails, or the write is short and the
        // next one fails: both must say so, never claim success.
        match result {
            Err(error) => assert_eq!(
                tailguard::os_error_code(&error),
                Some(libc::ENOSPC),
                "{choice:?}"
            ),
            Ok(written) => {
                assert!(
                    written < 256 * 1024,
                    "{choice:?}: a 64 KiB filesystem took {written} bytes"
                );
                let (again, _) = file.write_at(&class, pattern(0, 0), 256 * 1024).wait();
                assert_eq!(
                    tailguard::os_error_code(&again.unwrap_err()),
                    Some(libc::ENOSPC)
                );
            }
        }
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
    // Every scheduler is gone: nothing may hold a file of the filesystem open
    // any more (registered files are given up before the ring is closed).
    assert!(mount.unmount(), "the filesystem is not busy");
}

#[test]
fn a_file_dropped_with_requests_in_flight_keeps_its_descriptor_until_they_complete() {
    for (choice, scheduler) in backends() {
        let (file, path) = open_scratch(&scheduler, &format!("dropped-file-{choice:?}"));
        let class = scheduler.add_class("c", 1).unwrap();
        let futures: Vec<_> = (0..64u64)
            .map(|index| file.write_at(&class, pattern(index, 5), index * BLOCK as u64))
            .collect();
        drop(file);
        for future in futures {
            let (result, _) = future.wait();
            assert_eq!(
                result.unwrap(),
                BLOCK,
                "{choice:?}: no EBADF after the File is dropped"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_tiny_ring_still_completes_every_request() {
    // A 4-entry ring (or 4 ops in flight for the thread pool) under a budget that
    // admits dozens of pieces: the engine must make room by submitting and
    // reaping, never lose or reorder a completion.
    for choice in [BackendChoice::IoUring, BackendChoice::Threads] {
        let scheduler = match Scheduler::builder().backend(choice).ring_depth(4).build() {
            Ok(scheduler) => scheduler,
            Err(error) => {
                println!("skipping {choice:?}: {error}");
                continue;
            }
        };
        let (file, path) = open_scratch(&scheduler, &format!("tiny-ring-{choice:?}"));
        let class = scheduler.add_class("c", 1).unwrap();
        let writes: Vec<_> = (0..100u64)
            .map(|index| file.write_at(&class, pattern(index, 9), index * BLOCK as u64))
            .collect();
        for write in writes {
            assert_eq!(write.wait().0.unwrap(), BLOCK, "{choice:?}");
        }
        let all = AlignedBuffer::new(100 * BLOCK, BLOCK).unwrap();
        let (result, all) = file.read_at(&class, all, 0).wait();
        assert_eq!(result.unwrap(), 100 * BLOCK);
        for index in 0..100usize {
            assert_eq!(
                &all[index * BLOCK..(index + 1) * BLOCK],
                &pattern(index as u64, 9)[..]
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

/// A one-shot value set by another thread: a future that is not I/O.
#[derive(Default)]
struct Oneshot(std::sync::Mutex<(Option<u64>, Option<std::task::Waker>)>);

impl Oneshot {
    fn send(&self, value: u64) {
        let waker = {
            let mut state = self.0.lock().unwrap();
            state.0 = Some(value);
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn recv(&self) -> impl std::future::Future<Output = u64> + '_ {
        std::future::poll_fn(|context| {
            let mut state = self.0.lock().unwrap();
            match state.0 {
                Some(value) => std::task::Poll::Ready(value),
                None => {
                    state.1 = Some(context.waker().clone());
                    std::task::Poll::Pending
                }
            }
        })
    }
}

#[test]
fn block_on_drives_many_requests_from_one_thread_and_wakes_for_other_futures() {
    for (choice, scheduler) in backends() {
        let (file, path) = open_scratch(&scheduler, &format!("block-on-{choice:?}"));
        let class = scheduler.add_class("c", 100).unwrap();
        let blocks = 64u64;
        let oneshot = Arc::new(Oneshot::default());
        let sum = scheduler.block_on(async {
            let writes: Vec<_> = (0..blocks)
                .map(|index| file.write_at(&class, pattern(index, 3), index * BLOCK as u64))
                .collect();
            // Awaited newest first: completions in any order reach their futures.
            for write in writes.into_iter().rev() {
                assert_eq!(write.await.0.unwrap(), BLOCK);
            }
            // Reads in flight while this thread waits for a value from another
            // thread: the engine runs meanwhile, and the foreign wake-up ends the
            // wait even if this thread sleeps in the backend.
            let reads: Vec<_> = (0..blocks)
                .map(|index| {
                    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
                    file.read_at(&class, buffer, index * BLOCK as u64)
                })
                .collect();
            let sender = {
                let oneshot = oneshot.clone();
                std::thread::spawn(move || oneshot.send(41))
            };
            let value = oneshot.recv().await;
            sender.join().unwrap();
            for (index, read) in reads.into_iter().enumerate() {
                let (result, buffer) = read.await;
                assert_eq!(result.unwrap(), BLOCK);
                assert_eq!(&buffer[..], &pattern(index as u64, 3)[..], "{choice:?}");
            }
            value + 1
        });
        assert_eq!(sum, 42);
        let stats = scheduler.stats().unwrap();
        assert_eq!(stats.class("c").unwrap().ops, 2 * blocks, "{choice:?}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// Whether the kernel lists `path` as registered, looking a few times (see
/// [`registered_paths`]); `None` where the listing is not readable here.
fn registered_soon(path: &std::path::Path) -> Option<bool> {
    let path = path.canonicalize().unwrap();
    for _ in 0..100 {
        if registered_paths()?.contains(&path) {
            return Some(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Some(false)
}

/// Whether the kernel lists `path` as registered in one look (`None`: not
/// readable here). A `false` may come from a busy ring lock: use it only to
/// check that a file is *not* registered.
fn registered_now(path: &std::path::Path) -> Option<bool> {
    let path = path.canonicalize().unwrap();
    Some(registered_paths()?.contains(&path))
}

/// Writes block `index`'s pattern (salt `salt`) at block `index` of `file`
/// and reads it back.
fn write_and_check(file: &tailguard::File, class: &tailguard::IoClass, index: u64, salt: u64) {
    let (written, _) = file
        .write_at(class, pattern(index, salt), index * BLOCK as u64)
        .wait();
    assert_eq!(written.unwrap(), BLOCK);
    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    let (read, buffer) = file.read_at(class, buffer, index * BLOCK as u64).wait();
    assert_eq!(read.unwrap(), BLOCK);
    assert_eq!(&buffer[..], &pattern(index, salt)[..]);
}

/// Whether the running kernel is `major.minor` or newer.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let found = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    found >= (major, minor)
}

#[test]
fn files_are_registered_with_the_ring_unless_turned_off() {
    for slots in [tailguard::backend::DEFAULT_FILE_SLOTS, 0] {
        let Some(scheduler) = build_on(
            BackendChoice::IoUring,
            Scheduler::builder().registered_files(slots),
        ) else {
            return;
        };
        let (file, path) = open_scratch(&scheduler, &format!("registered-{slots}"));
        let class = scheduler.add_class("c", 1).unwrap();
        write_and_check(&file, &class, 0, 11);
        let registered = if slots == 0 {
            registered_now(&path)
        } else {
            registered_soon(&path)
        };
        println!("{slots} slots: registered per the kernel: {registered:?}");
        if let Some(registered) = registered {
            // A kernel without sparse tables (before 5.19) registers nothing,
            // nor does a run with TAILGUARD_REGISTERED_FILES=off.
            let forced_off = std::env::var("TAILGUARD_REGISTERED_FILES").as_deref() == Ok("off");
            let expected = slots > 0 && kernel_at_least(5, 19) && !forced_off;
            assert_eq!(registered, expected, "{slots} slots");
        }
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn more_files_than_table_slots_all_read_back_intact() {
    let Some(scheduler) = build_on(
        BackendChoice::IoUring,
        Scheduler::builder().registered_files(2),
    ) else {
        return;
    };
    let class = scheduler.add_class("c", 1).unwrap();
    let files: Vec<_> = (0..5)
        .map(|index| open_scratch(&scheduler, &format!("slots-{index}")))
        .collect();
    // Interleaved, so that every file is in use while the others are.
    for index in 0..20u64 {
        let (file, _) = &files[index as usize % files.len()];
        write_and_check(file, &class, index, 13);
    }
    let registered: Vec<_> = files
        .iter()
        .filter_map(|(_, path)| registered_now(path))
        .filter(|&registered| registered)
        .collect();
    assert!(registered.len() <= 2, "two slots: {registered:?}");
    for (file, path) in files {
        drop(file);
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(!data.is_empty());
    }
}

#[test]
fn closing_a_file_with_io_in_flight_completes_everything_once_then_frees_its_slot() {
    // One slot: the second file can only get it once the first file's
    // registration is given up.
    let Some(scheduler) = build_on(
        BackendChoice::IoUring,
        Scheduler::builder().registered_files(1),
    ) else {
        return;
    };
    let class = scheduler.add_class("c", 1).unwrap();
    let (first, first_path) = open_scratch(&scheduler, "close-in-flight-1");
    let futures: Vec<_> = (0..64u64)
        .map(|index| first.write_at(&class, pattern(index, 17), index * BLOCK as u64))
        .collect();
    let first_registered = registered_soon(&first_path);
    drop(first);
    let completed = futures
        .into_iter()
        .map(|future| future.wait().0.unwrap())
        .inspect(|&written| assert_eq!(written, BLOCK))
        .count();
    assert_eq!(completed, 64);
    let stats = scheduler.stats().unwrap();
    assert_eq!(
        stats.class("c").unwrap().ops,
        64,
        "each write completed once"
    );
    let data = std::fs::read(&first_path).unwrap();
    for index in 0..64usize {
        assert_eq!(
            &data[index * BLOCK..(index + 1) * BLOCK],
            &pattern(index as u64, 17)[..]
        );
    }

    let (second, second_path) = open_scratch(&scheduler, "close-in-flight-2");
    write_and_check(&second, &class, 0, 19);
    println!(
        "first registered while open: {first_registered:?}; after: {:?}; second: {:?}",
        registered_now(&first_path),
        registered_now(&second_path)
    );
    if first_registered == Some(true) {
        assert_eq!(registered_now(&first_path), Some(false), "slot given up");
        assert_eq!(
            registered_soon(&second_path),
            Some(true),
            "the freed slot went to the next file"
        );
    }
    drop(second);
    std::fs::remove_file(&first_path).unwrap();
    std::fs::remove_file(&second_path).unwrap();
}

#[test]
fn a_reused_descriptor_number_never_reaches_the_closed_file() {
    // Closing a registered file and opening another usually hands the new one
    // the same descriptor number; its I/O must reach the new file, not the one
    // the ring's slot held.
    let Some(scheduler) = scheduler(BackendChoice::IoUring) else {
        return;
    };
    let class = scheduler.add_class("c", 1).unwrap();
    let paths: Vec<_> = (0..8u64)
        .map(|round| {
            let (file, path) = open_scratch(&scheduler, &format!("reuse-{round}"));
            write_and_check(&file, &class, 0, round);
            drop(file);
            path
        })
        .collect();
    for (round, path) in paths.iter().enumerate() {
        let data = std::fs::read(path).unwrap();
        assert_eq!(
            &data[..BLOCK],
            &pattern(0, round as u64)[..],
            "file {round} holds its own data"
        );
        std::fs::remove_file(path).unwrap();
    }
}

/// Dropping a `File` tells the engine, so an idle scheduler gives up the
/// registration (the kernel's reference) without waiting for other activity.
#[test]
fn a_dropped_file_is_released_without_another_request() {
    let Some(scheduler) = scheduler(BackendChoice::IoUring) else {
        return;
    };
    let class = scheduler.add_class("c", 1).unwrap();
    let (file, path) = open_scratch(&scheduler, "dropped-while-idle");
    write_and_check(&file, &class, 0, 29);
    let was_registered = registered_soon(&path);
    println!("registered while open: {was_registered:?}");
    if was_registered != Some(true) {
        std::fs::remove_file(&path).unwrap();
        return; // registration off or not observable here: nothing to check
    }
    drop(file);
    // No request follows: only the drop's message can release it. A single
    // look may miss the listing (busy ring lock), so the release counts once
    // the file is absent from many looks in a row; a liveness bound, not a
    // timing assertion.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut absent_in_a_row = 0;
    while absent_in_a_row < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "a dropped file stays registered while the engine is idle"
        );
        absent_in_a_row = match registered_now(&path) {
            Some(false) => absent_in_a_row + 1,
            _ => 0,
        };
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::fs::remove_file(&path).unwrap();
    drop(scheduler);
}

#[test]
fn a_file_closed_while_idle_is_released_by_the_next_request() {
    let Some(scheduler) = scheduler(BackendChoice::IoUring) else {
        return;
    };
    let class = scheduler.add_class("c", 1).unwrap();
    let (file, path) = open_scratch(&scheduler, "closed-while-idle");
    write_and_check(&file, &class, 0, 23);
    let was_registered = registered_soon(&path);
    drop(file);
    // The engine looks for closed files at most once per sweep interval.
    std::thread::sleep(std::time::Duration::from_nanos(
        2 * tailguard::engine::FILE_SWEEP_INTERVAL_NS,
    ));
    scheduler.nop(&class).wait().unwrap();
    scheduler.stats().unwrap();
    println!("registered while open: {was_registered:?}");
    if was_registered == Some(true) {
        assert_eq!(registered_now(&path), Some(false), "released");
    }
    std::fs::remove_file(&path).unwrap();
}

/// Classes added from many threads at once reach the engine in the order of
/// their numbers: each class's requests are counted under its own name.
#[test]
fn classes_added_from_many_threads_keep_their_names_and_counts() {
    for (choice, scheduler) in backends() {
        let classes: Vec<tailguard::IoClass> = std::thread::scope(|scope| {
            let adders: Vec<_> = (0..8)
                .map(|thread| {
                    let scheduler = &scheduler;
                    scope.spawn(move || {
                        (0..40)
                            .map(|index| {
                                let name = format!("t{thread}-c{index}");
                                scheduler.add_class(&name, 1 + index).unwrap()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            adders
                .into_iter()
                .flat_map(|adder| adder.join().unwrap())
                .collect()
        });
        for (count, class) in classes.iter().enumerate() {
            for _ in 0..count % 3 + 1 {
                scheduler.nop(class).wait().unwrap();
            }
        }
        let stats = scheduler.stats().unwrap();
        for (count, class) in classes.iter().enumerate() {
            let counted = stats.class(class.name()).map(|class| class.ops);
            assert_eq!(
                counted,
                Some(count as u64 % 3 + 1),
                "{choice:?} {}",
                class.name()
            );
        }
    }
}

/// Files on a device the scheduler has not seen, opened from several threads
/// at once, each read at once: every first request finds its device known.
#[test]
fn a_new_device_opened_from_several_threads_serves_every_first_request() {
    let path = scratch("new-device");
    std::fs::write(&path, vec![7u8; BLOCK]).unwrap();
    for round in 0..40 {
        let choice = [BackendChoice::IoUring, BackendChoice::Threads][round % 2];
        let Some(scheduler) = scheduler(choice) else {
            continue;
        };
        let class = scheduler.add_class("reads", 100).unwrap();
        let barrier = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    barrier.wait();
                    let file = OpenOptions::new()
                        .read(true)
                        .open(&scheduler, &path)
                        .unwrap();
                    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
                    let (result, buffer) = file.read_at(&class, buffer, 0).wait();
                    assert_eq!(result.unwrap(), BLOCK, "{choice:?} round {round}");
                    assert!(buffer.iter().all(|&byte| byte == 7));
                });
            }
        });
    }
    std::fs::remove_file(&path).unwrap();
}
