//! The engine end to end, on both backends: data integrity from many threads and
//! classes, tokio, the blocking API, error paths, dropped futures and shutdown.
//!
//! Files live in cargo's per-test temporary directory, which is on a real disk
//! that supports O_DIRECT. io_uring tests skip with a printed reason where the
//! kernel or a seccomp profile refuses io_uring.

use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tailguard::{AlignedBuffer, BackendChoice, BackendKind, OpenOptions, Scheduler};

const BLOCK: usize = 4096;

fn scratch(name: &str) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("engine-tests");
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Opens (creating) a scratch file read-write with O_DIRECT through `scheduler`.
fn open_scratch(scheduler: &Scheduler, name: &str) -> (tailguard::File, PathBuf) {
    let path = scratch(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(scheduler, &path)
        .unwrap();
    (file, path)
}

/// A scheduler on `choice`, or `None` (with the reason printed) when this
/// machine refuses io_uring.
fn scheduler(choice: BackendChoice) -> Option<Scheduler> {
    scheduler_with(choice, true, true)
}

/// As [`scheduler`], choosing whether waiters run the engine themselves and
/// whether each request is submitted on its own or once per engine turn.
fn scheduler_with(
    choice: BackendChoice,
    waiters_run_engine: bool,
    eager_submit: bool,
) -> Option<Scheduler> {
    match Scheduler::builder()
        .backend(choice)
        .waiters_run_engine(waiters_run_engine)
        .eager_submit(eager_submit)
        .build()
    {
        Ok(scheduler) => Some(scheduler),
        Err(error) if choice == BackendChoice::IoUring => {
            println!(
                "skipping io_uring: {error} ({})",
                tailguard::backend::refusal_reason(&error)
            );
            None
        }
        Err(error) => panic!("{choice:?}: {error}"),
    }
}

/// Every backend, io_uring twice: with waiters running the engine (a shared
/// ring) and submitting each request on its own, and with the engine thread
/// alone (a single-issuer ring) submitting once per turn.
fn backends() -> Vec<(BackendChoice, Scheduler)> {
    [
        (BackendChoice::IoUring, true, true),
        (BackendChoice::IoUring, false, false),
        (BackendChoice::Threads, true, true),
    ]
    .into_iter()
    .filter_map(|(choice, helpers, eager)| {
        scheduler_with(choice, helpers, eager).map(|scheduler| (choice, scheduler))
    })
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
        assert_eq!(
            result.unwrap_err().raw_os_error(),
            Some(libc::EBADF),
            "{choice:?}"
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

/// Unmounts and removes a test mount point, even when the test fails.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_filesystem_reports_enospc() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: mounting a small tmpfs needs root");
        return;
    }
    let directory = scratch("enospc-mount");
    std::fs::create_dir_all(&directory).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tailguard-test"])
        .arg(&directory)
        .status()
        .unwrap();
    if !mounted.success() {
        let _ = std::fs::remove_dir(&directory);
        println!("skipping: mount -t tmpfs failed here (a container without CAP_SYS_ADMIN?)");
        return;
    }
    let mount = Mount(directory);
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
            Err(error) => assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{choice:?}"),
            Ok(written) => {
                assert!(
                    written < 256 * 1024,
                    "{choice:?}: a 64 KiB filesystem took {written} bytes"
                );
                let (again, _) = file.write_at(&class, pattern(0, 0), 256 * 1024).wait();
                assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
            }
        }
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
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
