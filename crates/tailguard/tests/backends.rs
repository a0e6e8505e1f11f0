//! Both backends against the `Backend` contract: O_DIRECT writes and reads in one
//! batch, nops, errors as `-errno`, wake-ups, a full queue, and the `auto`
//! fallback; io_uring's registered files (a full table, unregistering with ops
//! in flight, a kernel that refuses them). Every test runs on its own thread with a watchdog, so a hang fails
//! instead of blocking the run; backends are created on the thread that uses
//! them (the io_uring ring may be single-issuer).

mod common;
use common::registered_paths;
use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use tailguard::backend::threads::ThreadPool;
use tailguard::backend::uring::{FileTableCall, Uring, UringOptions};
use tailguard::backend::{
    auto, refusal_reason, Backend, BackendChoice, BackendConfig, BackendKind, Op, OpKind, OpResult,
};

/// How long any one test may take before it counts as hung.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Opens the backend of `kind`, or `None` (with the reason printed) when io_uring
/// is refused here.
fn open(kind: BackendKind, depth: u32) -> Option<Box<dyn Backend>> {
    match kind {
        BackendKind::Threads => Some(Box::new(
            ThreadPool::new(2, depth).expect("the thread pool starts"),
        )),
        BackendKind::IoUring => match Uring::new(depth) {
            Ok(ring) => {
                println!("io_uring features accepted: {:?}", ring.features());
                Some(Box::new(ring))
            }
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ENOSYS | libc::EPERM | libc::EOPNOTSUPP)
                ) =>
            {
                println!("skipping io_uring: {} ({error})", refusal_reason(&error));
                None
            }
            Err(error) => panic!("io_uring setup failed: {error}"),
        },
        other => panic!("no test backend for {other:?}"),
    }
}

/// Runs `test` against each backend, each on a fresh thread that creates the
/// backend and uses it, failing if it takes longer than [`WATCHDOG`].
fn for_each_backend(depth: u32, test: fn(&mut dyn Backend)) {
    for kind in [BackendKind::Threads, BackendKind::IoUring] {
        println!("backend {kind}");
        common::watched(WATCHDOG, move || {
            if let Some(mut backend) = open(kind, depth) {
                assert_eq!(backend.kind(), kind);
                test(backend.as_mut());
            }
        });
    }
}

/// Pushes `ops` (all must fit), submits them in one call, and waits until every
/// one has completed; returns the completions in arrival order.
fn run_batch(backend: &mut dyn Backend, ops: &[Op]) -> Vec<OpResult> {
    for op in ops {
        // SAFETY: the callers' buffers outlive this function, which returns only
        // after every op has been reaped.
        unsafe { backend.push(*op) }.expect("the batch fits the queue");
    }
    assert_eq!(backend.in_flight(), ops.len());
    backend.submit(false).expect("submit");
    let mut results = Vec::with_capacity(ops.len());
    while results.len() < ops.len() {
        backend.submit(true).expect("submit and wait");
        backend.reap(&mut results);
    }
    assert_eq!(results.len(), ops.len(), "no extra completions");
    assert_eq!(backend.in_flight(), 0);
    results
}

/// Checks that each op completed exactly once, with the expected result.
fn check_results(results: &[OpResult], expected: &HashMap<u64, i32>) {
    let mut seen = HashMap::new();
    for result in results {
        assert!(
            seen.insert(result.user_data, result.result).is_none(),
            "user_data {} completed twice",
            result.user_data
        );
    }
    assert_eq!(&seen, expected);
}

/// A heap buffer aligned for O_DIRECT.
struct AlignedBuffer {
    pointer: *mut u8,
    layout: Layout,
}

impl AlignedBuffer {
    fn zeroed(length: usize) -> Self {
        let layout = Layout::from_size_align(length, 4096).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { alloc::alloc_zeroed(layout) };
        assert!(!pointer.is_null(), "allocation failed");
        Self { pointer, layout }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `layout.size()` initialized bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.pointer, self.layout.size()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pointer, self.layout.size()) }
    }

    /// The start of the `index`th block of `block` bytes.
    fn block(&self, index: usize, block: usize) -> *mut u8 {
        assert!((index + 1) * block <= self.layout.size());
        // SAFETY: in bounds, checked above.
        unsafe { self.pointer.add(index * block) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { alloc::dealloc(self.pointer, self.layout) }
    }
}

/// A file opened with O_DIRECT, removed on drop.
struct DirectFile {
    path: PathBuf,
    file: OwnedFd,
}

impl DirectFile {
    /// Creates it in the temporary directory, or, where that filesystem refuses
    /// O_DIRECT (tmpfs: EINVAL), under the target directory or the current one.
    fn create(name: &str) -> Self {
        let directories = [
            std::env::temp_dir(),
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
            std::env::current_dir().expect("a current directory"),
        ];
        for directory in directories {
            let path = directory.join(format!(
                "tailguard-backends-{}-{name}.tmp",
                std::process::id()
            ));
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
            {
                Ok(file) => {
                    return Self {
                        path,
                        file: file.into(),
                    }
                }
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                    println!("no O_DIRECT in {}: {error}", directory.display());
                    let _ = std::fs::remove_file(&path);
                }
                Err(error) => panic!("cannot create {}: {error}", path.display()),
            }
        }
        panic!("no directory here takes O_DIRECT");
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

const BLOCK: usize = 4096;
const BLOCKS: usize = 64;

/// The byte at `position` of block `block`.
fn pattern(block: usize, position: usize) -> u8 {
    (block.wrapping_mul(31) ^ position.wrapping_mul(7) ^ (position >> 8)) as u8
}

#[test]
fn o_direct_write_sync_read_back_in_batches() {
    for_each_backend(64, |backend| {
        let file = DirectFile::create(&format!("data-{}", backend.kind()));
        let fd = file.file.as_raw_fd();
        let mut source = AlignedBuffer::zeroed(BLOCK * BLOCKS);
        for (index, byte) in source.as_mut_slice().iter_mut().enumerate() {
            *byte = pattern(index / BLOCK, index % BLOCK);
        }

        // 64 writes in one batch, in reverse order of offsets for good measure.
        let writes: Vec<Op> = (0..BLOCKS)
            .rev()
            .map(|block| {
                block_op(
                    block as u64,
                    fd,
                    OpKind::Write,
                    source.block(block, BLOCK),
                    block,
                )
            })
            .collect();
        let results = run_batch(backend, &writes);
        check_results(
            &results,
            &(0..BLOCKS)
                .map(|block| (block as u64, BLOCK as i32))
                .collect(),
        );

        let syncs = [
            bufferless(1000, fd, OpKind::Fdatasync),
            bufferless(1001, fd, OpKind::Fsync),
        ];
        let results = run_batch(backend, &syncs[..1]);
        check_results(&results, &[(1000, 0)].into());
        let results = run_batch(backend, &syncs[1..]);
        check_results(&results, &[(1001, 0)].into());

        // 63 block reads plus one read past the end of the file (short: 0 bytes).
        let target = AlignedBuffer::zeroed(BLOCK * (BLOCKS + 1));
        let reads: Vec<Op> = (0..=BLOCKS)
            .map(|block| {
                block_op(
                    2000 + block as u64,
                    fd,
                    OpKind::Read,
                    target.block(block, BLOCK),
                    block,
                )
            })
            .collect();
        let results = run_batch(backend, &reads[..BLOCKS]);
        let mut expected: HashMap<u64, i32> = (0..BLOCKS)
            .map(|block| (2000 + block as u64, BLOCK as i32))
            .collect();
        check_results(&results, &expected);
        let results = run_batch(backend, &reads[BLOCKS..]);
        expected.clear();
        expected.insert(2000 + BLOCKS as u64, 0);
        check_results(&results, &expected);

        assert!(
            target.as_slice()[..BLOCK * BLOCKS] == *source.as_slice(),
            "read back what was written"
        );
    });
}

#[test]
fn nops_complete_with_zero() {
    for_each_backend(32, |backend| {
        let nops: Vec<Op> = (0..32)
            .map(|index| bufferless(7 + index, -1, OpKind::Nop))
            .collect();
        for _ in 0..3 {
            let results = run_batch(backend, &nops);
            check_results(&results, &(7..7 + 32).map(|data| (data, 0)).collect());
        }
    });
}

#[test]
fn errors_come_back_as_negative_errno() {
    for_each_backend(8, |backend| {
        let buffer = AlignedBuffer::zeroed(BLOCK);
        let op = |user_data, kind| Op {
            user_data,
            fd: -1,
            kind,
            buffer: buffer.block(0, BLOCK),
            length: BLOCK as u32,
            offset: 0,
        };
        let ops = [
            op(1, OpKind::Read),
            op(2, OpKind::Write),
            op(3, OpKind::Fsync),
            op(4, OpKind::Fdatasync),
        ];
        let results = run_batch(backend, &ops);
        check_results(
            &results,
            &(1..=4).map(|data| (data, -libc::EBADF)).collect(),
        );

        // An O_DIRECT write at a misaligned file offset (memory alignment may be
        // relaxed, file offsets are not): EINVAL, and the backend keeps working.
        let file = DirectFile::create(&format!("misaligned-{}", backend.kind()));
        let misaligned = Op {
            user_data: 5,
            fd: file.file.as_raw_fd(),
            kind: OpKind::Write,
            buffer: buffer.block(0, BLOCK),
            length: 512,
            offset: 1,
        };
        let results = run_batch(backend, &[misaligned]);
        check_results(&results, &[(5, -libc::EINVAL)].into());
    });
}

#[test]
fn wake_ends_a_wait_with_nothing_in_flight() {
    for kind in [BackendKind::Threads, BackendKind::IoUring] {
        let (waker_tx, waker_rx) = mpsc::channel();
        let (returned_tx, returned_rx) = mpsc::channel();
        let engine = std::thread::spawn(move || {
            let Some(mut backend) = open(kind, 8) else {
                let _ = waker_tx.send(None);
                return;
            };
            waker_tx
                .send(Some(backend.waker()))
                .expect("main is waiting");
            // Two rounds: the wake read (io_uring) must be re-armed properly.
            for round in 0..2 {
                assert_eq!(backend.in_flight(), 0);
                backend.submit(true).expect("submit and wait");
                let mut results = Vec::new();
                backend.reap(&mut results);
                assert!(results.is_empty(), "a wake is not a completion");
                returned_tx.send(round).expect("main is waiting");
            }
            // A wake that arrives before the wait makes it return at once.
            backend.waker().wake();
            backend.submit(true).expect("submit and wait");
            let mut results = Vec::new();
            backend.reap(&mut results);
            assert!(results.is_empty());
            returned_tx.send(2).expect("main is waiting");
        });
        let Some(waker) = waker_rx.recv_timeout(WATCHDOG).expect("the engine started") else {
            engine.join().expect("the engine thread");
            continue;
        };
        for round in 0..2 {
            // Give the engine time to fall asleep: it must not return on its own.
            assert!(
                returned_rx
                    .recv_timeout(Duration::from_millis(100))
                    .is_err(),
                "{kind}: submit(true) returned with nothing to report"
            );
            waker.wake();
            assert_eq!(
                returned_rx.recv_timeout(WATCHDOG),
                Ok(round),
                "{kind}: the wake ended the wait"
            );
        }
        assert_eq!(returned_rx.recv_timeout(WATCHDOG), Ok(2), "{kind}");
        engine.join().expect("the engine thread");
    }
}

#[test]
fn pushing_past_depth_returns_the_op() {
    for_each_backend(8, |backend| {
        let op = |user_data| Op {
            user_data,
            fd: -1,
            kind: OpKind::Nop,
            buffer: std::ptr::null_mut(),
            length: 0,
            offset: 0,
        };
        for user_data in 0..8 {
            // SAFETY: nops have no buffer.
            unsafe { backend.push(op(user_data)) }.expect("within depth");
        }
        let extra = Op {
            user_data: 99,
            fd: 3,
            kind: OpKind::Read,
            buffer: 0x1000 as *mut u8,
            length: 4096,
            offset: 8192,
        };
        // SAFETY: the op is refused, so its (bogus) buffer is never used.
        assert_eq!(unsafe { backend.push(extra) }, Err(extra));
        assert_eq!(backend.in_flight(), 8);
        backend.submit(false).expect("submit");
        let mut results = Vec::new();
        while results.len() < 8 {
            backend.submit(true).expect("submit and wait");
            backend.reap(&mut results);
        }
        check_results(&results, &(0..8).map(|data| (data, 0)).collect());
        // Room again.
        // SAFETY: nops have no buffer.
        unsafe { backend.push(op(8)) }.expect("room after reaping");
        let _ = run_batch_after_push(backend, 1);
    });
}

/// Submits and waits for `count` ops already pushed.
fn run_batch_after_push(backend: &mut dyn Backend, count: usize) -> Vec<OpResult> {
    backend.submit(false).expect("submit");
    let mut results = Vec::new();
    while results.len() < count {
        backend.submit(true).expect("submit and wait");
        backend.reap(&mut results);
    }
    results
}

#[test]
fn completions_beyond_the_completion_queue_are_not_lost() {
    // io_uring: 6 submits of 8 nops without reaping overflow a 16-entry
    // completion queue. Threads: depth bounds in-flight ops, so later rounds push
    // nothing until the first is reaped.
    for_each_backend(8, |backend| {
        let mut next = 0u64;
        for _ in 0..6 {
            loop {
                let op = bufferless(next, -1, OpKind::Nop);
                // SAFETY: nops have no buffer.
                if unsafe { backend.push(op) }.is_err() {
                    break;
                }
                next += 1;
            }
            backend.submit(false).expect("submit");
        }
        assert_eq!(backend.in_flight(), next as usize);
        println!(
            "{}: {next} ops in flight before the first reap",
            backend.kind()
        );
        let mut results = Vec::new();
        while backend.in_flight() > 0 {
            backend.submit(true).expect("submit and wait");
            backend.reap(&mut results);
        }
        check_results(&results, &(0..next).map(|data| (data, 0)).collect());
    });
}

#[test]
fn auto_falls_back_to_threads_when_io_uring_is_forbidden() {
    let config = BackendConfig {
        choice: BackendChoice::Auto,
        ring_depth: 16,
        threads: 2,
        shared_ring: true,
    };
    let refused = || io::Error::from_raw_os_error(libc::EPERM);
    let mut backend =
        auto(config, |_depth| Err::<Uring, _>(refused())).expect("threads as a fallback");
    assert_eq!(backend.kind(), BackendKind::Threads);
    assert!(refusal_reason(&refused()).contains("seccomp"));
    let results = run_batch(backend.as_mut(), &[bufferless(1, -1, OpKind::Nop)]);
    check_results(&results, &[(1, 0)].into());
}

/// Opens an io_uring ring with `options`, or `None` (printed) where io_uring
/// is refused here.
fn open_uring(depth: u32, options: UringOptions) -> Option<Uring> {
    match Uring::with_options(depth, options) {
        Ok(ring) => Some(ring),
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc::ENOSYS | libc::EPERM | libc::EOPNOTSUPP)
            ) =>
        {
            println!("skipping io_uring: {} ({error})", refusal_reason(&error));
            None
        }
        Err(error) => panic!("io_uring setup failed: {error}"),
    }
}

/// [`open_uring`] for tests of the registered-file table: `None` (with the
/// reason printed) also when the kernel refused the table.
fn open_uring_with_file_table(depth: u32, options: UringOptions) -> Option<Uring> {
    let ring = open_uring(depth, options)?;
    if ring.file_slots() == 0 {
        println!("skipping: this kernel refused a registered-file table");
        return None;
    }
    Some(ring)
}

/// Runs `test` on a fresh thread with the watchdog, like [`for_each_backend`].
fn on_watched_thread(test: impl FnOnce() + Send + 'static) {
    common::watched(WATCHDOG, test);
}

/// Whether `path` is registered with a ring; `None` where that cannot be seen.
fn is_registered(path: &std::path::Path) -> Option<bool> {
    registered_paths().map(|paths| paths.iter().any(|registered| registered == path))
}

/// Writes block `index`'s pattern to `fd` at block `index`, then reads it
/// back, through `backend`; checks both.
fn write_and_read_back(backend: &mut dyn Backend, fd: i32, index: usize) {
    let mut source = AlignedBuffer::zeroed(BLOCK);
    for (position, byte) in source.as_mut_slice().iter_mut().enumerate() {
        *byte = pattern(index, position);
    }
    let target = AlignedBuffer::zeroed(BLOCK);
    let write = Op {
        user_data: 1,
        fd,
        kind: OpKind::Write,
        buffer: source.block(0, BLOCK),
        length: BLOCK as u32,
        offset: (index * BLOCK) as u64,
    };
    check_results(&run_batch(backend, &[write]), &[(1, BLOCK as i32)].into());
    let read = Op {
        user_data: 2,
        kind: OpKind::Read,
        buffer: target.block(0, BLOCK),
        ..write
    };
    check_results(&run_batch(backend, &[read]), &[(2, BLOCK as i32)].into());
    assert!(
        target.as_slice() == source.as_slice(),
        "block {index} reads back"
    );
}

#[test]
fn registered_files_carry_data_and_a_full_table_falls_back_to_descriptors() {
    on_watched_thread(|| {
        let options = UringOptions {
            file_slots: 2,
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring_with_file_table(8, options) else {
            return;
        };
        assert!(ring.registers_files());
        let files: Vec<_> = (0..3)
            .map(|index| DirectFile::create(&format!("slots-{index}")))
            .collect();
        let fds: Vec<_> = files.iter().map(|file| file.file.as_raw_fd()).collect();
        let registered: Vec<_> = fds.iter().map(|&fd| ring.register_file(fd)).collect();
        assert_eq!(registered, [true, true, false], "two slots, three files");
        assert!(ring.register_file(fds[0]), "registering twice is harmless");
        assert!(
            !ring.register_file(tailguard::backend::MAX_REGISTERED_FD),
            "descriptors past the bound are never registered"
        );
        let seen = registered_paths();
        println!("registered, as the kernel lists them: {seen:?}");
        if let Some(seen) = seen {
            assert!(seen.contains(&files[0].path) && seen.contains(&files[1].path));
            assert!(!seen.contains(&files[2].path), "the third file has no slot");
        }
        for (index, &fd) in fds.iter().enumerate() {
            write_and_read_back(&mut ring, fd, index);
        }
        // A freed slot goes to the next file.
        ring.unregister_file(fds[0]);
        if let Some(registered) = is_registered(&files[0].path) {
            assert!(!registered, "its slot is cleared");
        }
        assert!(ring.register_file(fds[2]), "the freed slot is reused");
        for (index, &fd) in fds.iter().enumerate() {
            write_and_read_back(&mut ring, fd, index + 3);
        }
        for fd in fds {
            ring.unregister_file(fd);
        }
    });
}

#[test]
fn unregistering_with_ops_in_flight_completes_each_op_once_on_the_right_file() {
    on_watched_thread(|| {
        let options = UringOptions {
            file_slots: 4,
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring_with_file_table(64, options) else {
            return;
        };
        let file = DirectFile::create("unregister-in-flight");
        let fd = file.file.as_raw_fd();
        let mut source = AlignedBuffer::zeroed(BLOCK * 32);
        for (index, byte) in source.as_mut_slice().iter_mut().enumerate() {
            *byte = pattern(index / BLOCK, index % BLOCK);
        }
        let write = |block: usize| {
            block_op(
                block as u64,
                fd,
                OpKind::Write,
                source.block(block, BLOCK),
                block,
            )
        };
        // Round 1: pushed on the slot, unregistered before they are submitted
        // (the slot is cleared only after the submit). Round 2: submitted,
        // then unregistered while in flight (cleared at once; the kernel
        // keeps the file for them). Round 3: pushed after, on the descriptor.
        assert!(ring.register_file(fd));
        for block in 0..8 {
            // SAFETY: `source` outlives every op: each is reaped below.
            unsafe { ring.push(write(block)) }.expect("fits");
        }
        ring.unregister_file(fd);
        ring.submit(false).expect("submit");
        assert!(ring.register_file(fd), "a new slot for the same file");
        for block in 8..16 {
            // SAFETY: as above.
            unsafe { ring.push(write(block)) }.expect("fits");
        }
        ring.submit(false).expect("submit");
        ring.unregister_file(fd);
        for block in 16..32 {
            // SAFETY: as above.
            unsafe { ring.push(write(block)) }.expect("fits");
        }
        ring.submit(false).expect("submit");
        let mut results = Vec::new();
        while ring.in_flight() > 0 {
            ring.submit(true).expect("submit and wait");
            ring.reap(&mut results);
        }
        check_results(
            &results,
            &(0..32).map(|block| (block, BLOCK as i32)).collect(),
        );
        assert!(
            !is_registered(&file.path).unwrap_or(false),
            "no slot holds the file any more"
        );
        let written = std::fs::read(&file.path).expect("read back");
        assert!(written == source.as_slice(), "every write reached the file");
    });
}

/// A descriptor [`a_refused_file_install_falls_back_for_that_file_only`]
/// refuses to install (tests run in parallel: one static per test).
static REFUSED_FD: AtomicI32 = AtomicI32::new(-1);
/// Installs attempted by [`a_kernel_that_refuses_installs_turns_the_feature_off`].
static INSTALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn backends_without_a_file_table_register_nothing_and_keep_working() {
    // The thread pool, and a ring built without a table (`Uring::new`).
    for_each_backend(8, |backend| {
        let file = DirectFile::create(&format!("no-table-{}", backend.kind()));
        let fd = file.file.as_raw_fd();
        assert!(!backend.registers_files());
        assert!(!backend.register_file(fd));
        write_and_read_back(backend, fd, 0);
        backend.unregister_file(fd);
    });
}

#[test]
fn a_refused_file_table_leaves_plain_descriptors() {
    on_watched_thread(|| {
        let options = UringOptions {
            file_slots: 16,
            // A kernel older than 5.19 answers a sparse table with EINVAL.
            refuse_file_table: Some(|call| {
                matches!(call, FileTableCall::Create { .. }).then_some(libc::EINVAL)
            }),
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring(8, options) else {
            return;
        };
        assert_eq!(ring.file_slots(), 0);
        assert!(!ring.registers_files());
        let file = DirectFile::create("refused-table");
        let fd = file.file.as_raw_fd();
        assert!(!ring.register_file(fd));
        write_and_read_back(&mut ring, fd, 0);
        ring.unregister_file(fd);
    });
}

#[test]
fn a_refused_file_install_falls_back_for_that_file_only() {
    on_watched_thread(|| {
        let options = UringOptions {
            file_slots: 16,
            refuse_file_table: Some(|call| match call {
                FileTableCall::Install { fd, .. } if fd == REFUSED_FD.load(Ordering::SeqCst) => {
                    Some(libc::EBADF)
                }
                _ => None,
            }),
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring_with_file_table(8, options) else {
            return;
        };
        let refused = DirectFile::create("refused-install");
        let accepted = DirectFile::create("accepted-install");
        REFUSED_FD.store(refused.file.as_raw_fd(), Ordering::SeqCst);
        assert!(!ring.register_file(refused.file.as_raw_fd()));
        assert!(ring.registers_files(), "EBADF concerns that file only");
        assert!(ring.register_file(accepted.file.as_raw_fd()));
        write_and_read_back(&mut ring, refused.file.as_raw_fd(), 0);
        write_and_read_back(&mut ring, accepted.file.as_raw_fd(), 1);
        ring.unregister_file(accepted.file.as_raw_fd());
        ring.unregister_file(refused.file.as_raw_fd());
    });
}

#[test]
fn a_kernel_that_refuses_installs_turns_the_feature_off() {
    on_watched_thread(|| {
        let options = UringOptions {
            file_slots: 16,
            refuse_file_table: Some(|call| match call {
                FileTableCall::Install { .. } => {
                    INSTALLS.fetch_add(1, Ordering::SeqCst);
                    Some(libc::EINVAL)
                }
                _ => None,
            }),
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring_with_file_table(8, options) else {
            return;
        };
        let first = DirectFile::create("einval-install-1");
        let second = DirectFile::create("einval-install-2");
        assert!(!ring.register_file(first.file.as_raw_fd()));
        assert!(!ring.registers_files(), "EINVAL turns the feature off");
        assert_eq!(ring.file_slots(), 0);
        assert!(!ring.register_file(second.file.as_raw_fd()));
        assert_eq!(INSTALLS.load(Ordering::SeqCst), 1, "no further attempt");
        write_and_read_back(&mut ring, first.file.as_raw_fd(), 0);
        write_and_read_back(&mut ring, second.file.as_raw_fd(), 1);
    });
}

#[test]
#[ignore = "benchmark: run by hand, prints NOP rate"]
fn nop_rate() {
    const BATCH: usize = 32;
    for_each_backend(64, |backend| {
        let nop = |index: usize, _| bufferless(index as u64, -1, OpKind::Nop);
        // SAFETY: nops have no buffer.
        let (completed, seconds) = unsafe { batches_for_a_second(backend, BATCH, nop, |_| {}) };
        println!(
            "{}: {:.0} NOPs/s ({completed} in {seconds:.2} s, batches of {BATCH})",
            backend.kind(),
            completed as f64 / seconds
        );
    });
}

#[test]
#[ignore = "benchmark: run by hand, prints page-cache read rates with and without registered files"]
fn cached_read_rate_registered_or_not() {
    // 4 KiB reads of a 1 MiB file in the page cache (no O_DIRECT, so no
    // device is involved): the CPU cost per op of a plain descriptor against
    // a registered one, alternating rounds of one second each.
    const BATCH: usize = 32;
    on_watched_thread(|| {
        let path = std::env::temp_dir().join(format!("tailguard-cached-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 1 << 20]).expect("a scratch file");
        let file = std::fs::File::open(&path).expect("open");
        let fd = file.as_raw_fd();
        let options = UringOptions {
            file_slots: 4,
            ..UringOptions::default()
        };
        let Some(mut ring) = open_uring(64, options) else {
            return;
        };
        let buffers = AlignedBuffer::zeroed(BLOCK * BATCH);
        for round in 0..6 {
            let registered = round % 2 == 1 && ring.register_file(fd);
            let read = |index: usize, completed: u64| Op {
                user_data: index as u64,
                fd,
                kind: OpKind::Read,
                buffer: buffers.block(index, BLOCK),
                length: BLOCK as u32,
                offset: ((completed as usize + index) % 256 * BLOCK) as u64,
            };
            let whole = |results: &[OpResult]| {
                assert!(results.iter().all(|result| result.result == BLOCK as i32));
            };
            // SAFETY: `buffers` outlives the call, which reaps every op.
            let (completed, seconds) =
                unsafe { batches_for_a_second(&mut ring, BATCH, read, whole) };
            ring.unregister_file(fd);
            println!(
                "{}: {:.0} reads/s ({completed} in {seconds:.2} s, batches of {BATCH})",
                if registered { "registered" } else { "plain" },
                completed as f64 / seconds
            );
        }
        let _ = std::fs::remove_file(&path);
    });
}

/// An op that moves no data (a nop, `fsync` or `fdatasync`) on `fd`.
fn bufferless(user_data: u64, fd: RawFd, kind: OpKind) -> Op {
    Op {
        user_data,
        fd,
        kind,
        buffer: std::ptr::null_mut(),
        length: 0,
        offset: 0,
    }
}

/// An op moving one block between `buffer` and block `block` of `fd`.
fn block_op(user_data: u64, fd: RawFd, kind: OpKind, buffer: *mut u8, block: usize) -> Op {
    Op {
        user_data,
        fd,
        kind,
        buffer,
        length: BLOCK as u32,
        offset: (block * BLOCK) as u64,
    }
}

/// Pushes batches of `batch` ops, `op(index, completed so far)` each, and waits
/// for every batch to complete, for one second; `check` sees each set of
/// results reaped. Returns the ops completed and the seconds it took.
///
/// # Safety
///
/// Every buffer the ops name stays valid until this returns (it reaps every op
/// it pushed before returning).
unsafe fn batches_for_a_second(
    backend: &mut dyn Backend,
    batch: usize,
    mut op: impl FnMut(usize, u64) -> Op,
    mut check: impl FnMut(&[OpResult]),
) -> (u64, f64) {
    let mut results = Vec::with_capacity(batch);
    let (start, mut completed) = (Instant::now(), 0u64);
    while start.elapsed() < Duration::from_secs(1) {
        for index in 0..batch {
            // SAFETY: the caller keeps the op's buffer valid until it is
            // reaped below.
            unsafe { backend.push(op(index, completed)) }.expect("the batch fits");
        }
        while backend.in_flight() > 0 {
            backend.submit(true).expect("submit and wait");
            results.clear();
            backend.reap(&mut results);
            check(&results);
            completed += results.len() as u64;
        }
    }
    (completed, start.elapsed().as_secs_f64())
}
