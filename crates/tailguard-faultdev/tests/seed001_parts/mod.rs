//! Parts of seed 001 on the real kernel path, shared by the `seed001` test and
//! the `seed001` example: the fast disk (a preallocated file on this
//! machine's disk, written with O_DIRECT), the slow stick's profile, and the
//! two ways of writing to both devices at once:
//!
//! - [`tailguard_writer`]: through one tailguard [`Scheduler`], which gives
//!   each device a dispatcher and an in-flight budget of its own;
//! - [`SharedCap`]: one backend (one io_uring ring, or one pool of threads)
//!   for both devices under one in-flight cap, admitted in arrival order:
//!   FreeBSD's `vfs.hirunningspace`, the seed's shared cap, in userspace.
//!
//! Each writer keeps a fixed number of 128 KiB sequential writes outstanding
//! on its device and wraps at the end of its region.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tailguard::backend::{Backend, Op, OpKind, OpResult};
use tailguard::{AlignedBuffer, IoFuture, Scheduler};

/// Every write's size: the seed's 128 KiB.
pub const WRITE_BYTES: usize = 128 << 10;

/// Alignment of every buffer (enough for O_DIRECT on any sector size).
pub const ALIGN_BYTES: usize = 4096;

/// A file on this machine's disk, preallocated and written once (so that
/// O_DIRECT overwrites never allocate), removed with its directory on drop.
pub struct FastFile {
    dir: PathBuf,
    path: PathBuf,
    size_bytes: u64,
}

impl FastFile {
    /// Creates `size_bytes` (a multiple of [`WRITE_BYTES`]) of written data in
    /// a new directory under `parent`.
    pub fn create(parent: &Path, size_bytes: u64) -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = parent.join(format!(
            "tailguard-seed001-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let file = Self {
            path: dir.join("fast.data"),
            dir,
            size_bytes,
        };
        let handle = std::fs::File::create(&file.path)?;
        let chunk = vec![0x5a_u8; 1 << 20];
        let mut written = 0;
        while written < size_bytes {
            let length = chunk.len().min((size_bytes - written) as usize);
            handle.write_all_at(&chunk[..length], written)?;
            written += length as u64;
        }
        handle.sync_all()?;
        Ok(file)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
}

impl Drop for FastFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The `usb-flash` model's own profile (what `tailguard tune` would measure
/// on the stick): 128 KiB requests, a 500 ms latency target.
pub fn stick_profile() -> tailguard::Profile {
    tailguard_sim::device::build(
        tailguard_sim::device::ModelName::UsbFlash,
        &toml::Table::new(),
        1,
    )
    .expect("the usb-flash model builds with its defaults")
    .profile()
}

/// The kernel name of a block device (`loop3` for `/dev/loop3`), the name
/// tailguard's statistics use.
pub fn device_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Opens `path` for O_DIRECT writes.
pub fn open_direct(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// A buffer of one write.
pub fn write_buffer() -> AlignedBuffer {
    let mut buffer = AlignedBuffer::new(WRITE_BYTES, ALIGN_BYTES).expect("allocation");
    buffer.fill(0xa5);
    buffer
}

/// Sequential offsets over `region_bytes`, wrapping.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    next_offset: u64,
    region_bytes: u64,
}

impl Stream {
    /// A stream from 0 over `region_bytes` (a multiple of [`WRITE_BYTES`]).
    pub fn new(region_bytes: u64) -> Self {
        Self {
            next_offset: 0,
            region_bytes,
        }
    }

    /// The next write's offset.
    pub fn next_offset(&mut self) -> u64 {
        let offset = self.next_offset;
        self.next_offset = (offset + WRITE_BYTES as u64) % self.region_bytes;
        offset
    }
}

/// What a writer saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriterCounts {
    /// Writes that completed with all their bytes.
    pub completed: u64,
    /// Of those, the ones that completed inside the measured window.
    pub in_window: u64,
}

/// A measured window: writes completing in `start..end` are counted.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Start of the window.
    pub start: Instant,
    /// End of the window; writers stop issuing here.
    pub end: Instant,
}

impl Window {
    fn contains(&self, at: Instant) -> bool {
        at >= self.start && at < self.end
    }
}

/// Keeps `depth` writes outstanding on `path` through `scheduler` until
/// `window.end` or `stop`, then waits for the last ones. Every write must
/// complete with all its bytes.
pub fn tailguard_writer(
    scheduler: &Scheduler,
    path: &Path,
    region_bytes: u64,
    depth: usize,
    window: Window,
    stop: &AtomicBool,
) -> WriterCounts {
    let file = scheduler.open(path).expect("open through tailguard");
    let class = scheduler
        .add_class(&format!("writer-{}", device_name(path)), 100)
        .expect("class");
    let mut stream = Stream::new(region_bytes);
    let mut in_flight: VecDeque<IoFuture<tailguard::BufResult>> = VecDeque::new();
    let mut counts = WriterCounts::default();
    loop {
        let running = Instant::now() < window.end && !stop.load(Ordering::Relaxed);
        while running && in_flight.len() < depth {
            in_flight.push_back(file.write_at(&class, write_buffer(), stream.next_offset()));
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        let (result, _) = oldest.wait();
        assert_eq!(
            result.expect("a write through tailguard"),
            WRITE_BYTES,
            "a whole write"
        );
        counts.completed += 1;
        counts.in_window += u64::from(window.contains(Instant::now()));
    }
    class.remove().expect("remove the class");
    counts
}

/// One device's writer under a [`SharedCap`].
struct CapWriter {
    file: std::fs::File,
    stream: Stream,
    depth: usize,
    /// Queued for the cap or in flight.
    outstanding: usize,
    counts: WriterCounts,
}

/// One backend for several devices under one in-flight cap, admitted in
/// arrival order; see the module docs.
pub struct SharedCap {
    backend: Box<dyn Backend>,
    cap: usize,
    writers: Vec<CapWriter>,
    /// Writes waiting for room under the cap: (writer, offset).
    waiting: VecDeque<(usize, u64)>,
    /// Buffers by slot; a slot is free when its entry is `None` in `slots`.
    buffers: Vec<AlignedBuffer>,
    slots: Vec<Option<usize>>,
    free_slots: Vec<usize>,
    in_flight: usize,
}

impl SharedCap {
    /// `backend` shared by every writer, at most `cap` writes in flight.
    pub fn new(backend: Box<dyn Backend>, cap: usize) -> Self {
        Self {
            backend,
            cap,
            writers: Vec::new(),
            waiting: VecDeque::new(),
            buffers: (0..cap).map(|_| write_buffer()).collect(),
            slots: vec![None; cap],
            free_slots: (0..cap).rev().collect(),
            in_flight: 0,
        }
    }

    /// Adds a writer keeping `depth` writes outstanding on `path` over
    /// `region_bytes`; returns its index. Earlier writers queue first.
    pub fn add_writer(&mut self, path: &Path, region_bytes: u64, depth: usize) -> usize {
        self.writers.push(CapWriter {
            file: open_direct(path).expect("open O_DIRECT"),
            stream: Stream::new(region_bytes),
            depth,
            outstanding: 0,
            counts: WriterCounts::default(),
        });
        self.writers.len() - 1
    }

    /// Writes in flight now (admitted under the cap, not yet completed).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Writer `index`'s counts.
    pub fn counts(&self, index: usize) -> WriterCounts {
        self.writers[index].counts
    }

    /// Every writer tops up its outstanding writes, and what fits under the
    /// cap is handed to the backend, in arrival order.
    pub fn issue(&mut self) {
        for (index, writer) in self.writers.iter_mut().enumerate() {
            while writer.outstanding < writer.depth {
                self.waiting.push_back((index, writer.stream.next_offset()));
                writer.outstanding += 1;
            }
        }
        self.admit();
    }

    fn admit(&mut self) {
        while self.in_flight < self.cap {
            let Some((writer, offset)) = self.waiting.pop_front() else {
                break;
            };
            let slot = self
                .free_slots
                .pop()
                .expect("a slot per write under the cap");
            self.slots[slot] = Some(writer);
            let op = Op {
                user_data: slot as u64,
                fd: self.writers[writer].file.as_raw_fd(),
                kind: OpKind::Write,
                buffer: self.buffers[slot].as_mut_ptr(),
                length: WRITE_BYTES as u32,
                offset,
            };
            // SAFETY: the op's buffer is `self.buffers[slot]`, which stays
            // allocated and untouched until the slot is freed in `complete`,
            // after the backend reported the op done; the file stays open as
            // long as `self`. Where `self` is dropped with ops in flight (a
            // panic in `complete`), its `Drop` waits for them, and leaks the
            // buffers and files of any that do not finish in time.
            let mut pending = op;
            while let Err(returned) = unsafe { self.backend.push(pending) } {
                pending = returned;
                self.backend.submit(false).expect("submit");
            }
            self.in_flight += 1;
        }
        self.backend.submit(false).expect("submit");
    }

    /// Waits for at least one completion (when any write is in flight) and
    /// takes every completion available; completions are counted at `now`
    /// against `window`.
    pub fn complete(&mut self, window: Option<&Window>) {
        if self.in_flight > 0 {
            self.backend.submit(true).expect("submit and wait");
        }
        let mut done: Vec<OpResult> = Vec::new();
        self.backend.reap(&mut done);
        let now = Instant::now();
        for completion in done {
            let slot = completion.user_data as usize;
            let writer = self.slots[slot]
                .take()
                .expect("a completion of a write in flight");
            self.free_slots.push(slot);
            self.in_flight -= 1;
            assert_eq!(
                completion.result, WRITE_BYTES as i32,
                "a whole write under the shared cap"
            );
            let counts = &mut self.writers[writer].counts;
            counts.completed += 1;
            counts.in_window += u64::from(window.is_some_and(|window| window.contains(now)));
            self.writers[writer].outstanding -= 1;
        }
        self.admit();
    }

    /// Stops issuing (writes still waiting for the cap are dropped, never
    /// submitted) and waits for every write in flight.
    pub fn drain(&mut self) {
        for (writer, _) in self.waiting.drain(..) {
            self.writers[writer].outstanding -= 1;
        }
        while self.in_flight > 0 {
            self.complete(None);
        }
    }

    /// Runs every writer until `window.end`, then drains.
    pub fn run(&mut self, window: &Window) {
        while Instant::now() < window.end {
            self.issue();
            self.complete(Some(window));
        }
        self.drain();
    }
}

/// How long a dropped [`SharedCap`] waits for its writes in flight.
const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

impl Drop for SharedCap {
    /// Dropped with writes in flight (a panic in [`SharedCap::complete`]):
    /// waits up to [`DROP_DRAIN_TIMEOUT`] for them, then leaks the buffers
    /// and files that the backend (a detached pool thread, a ring torn down
    /// later) may still use. Never panics, so it is safe during unwinding.
    fn drop(&mut self) {
        let deadline = Instant::now() + DROP_DRAIN_TIMEOUT;
        let mut done: Vec<OpResult> = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.backend.submit_wait_timeout(left).is_err() {
                break;
            }
            self.backend.reap(&mut done);
            self.in_flight = self.in_flight.saturating_sub(done.len());
            done.clear();
        }
        if self.in_flight > 0 {
            std::mem::forget(std::mem::take(&mut self.buffers));
            std::mem::forget(std::mem::take(&mut self.writers));
        }
    }
}
