//! # tailguard-ffi: the C ABI of tailguard
//!
//! A shared library (`libtailguard_ffi.so`) and a static one
//! (`libtailguard_ffi.a`) whose functions wrap the Rust API one to one; the
//! header `include/tailguard.h` is generated from this file by cbindgen and
//! checked in (a test fails when it is stale, and names the command that
//! regenerates it). The rules a C caller must follow (who owns which memory,
//! which handles may be shared between threads) open the header; they are
//! written once, in `cbindgen.toml`.
//!
//! Handles are opaque pointers to Rust objects in a `Box`: `tg_scheduler`
//! (a [`Scheduler`] and a completion thread), `tg_class` ([`IoClass`]),
//! `tg_file` ([`File`]), `tg_buffer` ([`AlignedBuffer`]) and `tg_queue` (a
//! completion queue with an eventfd). Every function that can fail returns 0
//! or a count on success and a negative errno on failure, and leaves the
//! error's message for [`tg_last_error`] in a thread-local string. No Rust
//! panic crosses the boundary: each entry point catches it and reports
//! `-EIO`.
//!
//! Blocking calls wait for their request with [`tailguard::IoFuture::wait`]
//! on the calling thread. Asynchronous calls hand the request's future to the
//! scheduler's completion thread, which polls it when the engine wakes it and
//! then delivers the result: it calls the caller's callback, or appends a
//! `tg_completion` to a `tg_queue` and adds 1 to the queue's eventfd, which
//! the caller can watch in its own epoll loop. The buffer of an asynchronous
//! read or write belongs to the library from the call until its completion is
//! delivered, the same ownership the Rust API expresses by taking the buffer
//! by value; the completion hands the same `tg_buffer` pointer back.

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Duration;
use tailguard::{
    AlignedBuffer, BackendChoice, BufResult, ControllerChoice, File, IoClass, IoFuture,
    OpenOptions, Scheduler,
};

/// Backend: io_uring where the kernel allows it, else the thread pool.
pub const TG_BACKEND_AUTO: u32 = 0;
/// Backend: io_uring only (creation fails without it).
pub const TG_BACKEND_IO_URING: u32 = 1;
/// Backend: the thread pool.
pub const TG_BACKEND_THREADS: u32 = 2;

/// Controller: the budget the device's profile derives, fixed.
pub const TG_CONTROLLER_FIXED: u32 = 0;
/// Controller: the budget resized online from completion times.
pub const TG_CONTROLLER_ADAPTIVE: u32 = 1;

/// `tg_file_open` flag: open for reading.
pub const TG_OPEN_READ: u32 = 1;
/// `tg_file_open` flag: open for writing.
pub const TG_OPEN_WRITE: u32 = 2;
/// `tg_file_open` flag: create the file if missing.
pub const TG_OPEN_CREATE: u32 = 4;
/// `tg_file_open` flag: truncate the file to zero length.
pub const TG_OPEN_TRUNCATE: u32 = 8;
/// `tg_file_open` flag: buffered I/O through the page cache instead of
/// O_DIRECT (for filesystems that refuse O_DIRECT, such as tmpfs).
pub const TG_OPEN_BUFFERED: u32 = 16;

/// `tg_scheduler_options.registered_files`: the library's default.
pub const TG_REGISTERED_FILES_DEFAULT: u32 = u32::MAX;

/// `tg_scheduler_options.engine_linger_us`: the engine thread parks as soon
/// as nothing is in flight, without lingering.
pub const TG_ENGINE_LINGER_OFF: u64 = u64::MAX;

/// How to build a scheduler. Fill it with
/// `tg_scheduler_options_init(&options, sizeof options)` first, then change
/// the fields you need. The size makes the struct versioned: a library newer
/// than the caller's header takes the fields the caller knows and keeps its
/// defaults for the rest, and one older than the header takes the fields it
/// knows as long as the caller left the newer ones at their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tg_scheduler_options {
    /// `sizeof(tg_scheduler_options)` as the caller's header has it, set by
    /// `tg_scheduler_options_init`.
    pub size: usize,
    /// The latency target of every device, in microseconds; 0 keeps each
    /// device profile's own.
    pub latency_target_us: u64,
    /// Entries of the io_uring ring (requests in flight for the thread
    /// pool); 0 for the default (256).
    pub ring_depth: u32,
    /// Worker threads of the thread-pool backend; 0 for the default (4).
    pub threads: u32,
    /// `TG_BACKEND_AUTO` (default), `TG_BACKEND_IO_URING` or
    /// `TG_BACKEND_THREADS`.
    pub backend: u32,
    /// `TG_CONTROLLER_FIXED` (default) or `TG_CONTROLLER_ADAPTIVE`.
    pub controller: u32,
    /// Whether a thread blocked on a result runs the engine itself while
    /// nobody else does (default true: no thread hop per blocking request).
    pub waiters_run_engine: bool,
    /// Whether each request goes to the kernel as soon as it is dispatched
    /// (default true) or once per engine turn (fewer system calls).
    pub eager_submit: bool,
    /// Files registered with the io_uring ring; 0 turns registration off,
    /// `TG_REGISTERED_FILES_DEFAULT` keeps the default.
    pub registered_files: u32,
    /// A device profile file (what `tailguard tune` wrote, or Seastar's
    /// io_properties.yaml), or NULL for the built-in guesses. Read during
    /// `tg_scheduler_new` only.
    pub profile_file: *const c_char,
    /// How long the engine thread keeps looking for requests, spinning,
    /// once nothing is in flight, before it parks, in microseconds: a
    /// request submitted meanwhile needs no wake-up of that thread. 0 keeps
    /// the default (50 µs); `TG_ENGINE_LINGER_OFF` parks at once.
    pub engine_linger_us: u64,
}

/// A scheduler: an engine thread, and a completion thread for asynchronous
/// requests. Thread-safe.
pub struct tg_scheduler {
    scheduler: Scheduler,
    completions: Arc<Completions>,
}

/// An I/O class. Thread-safe.
pub struct tg_class {
    class: IoClass,
}

/// A file opened through a scheduler. Thread-safe.
pub struct tg_file {
    file: File,
    /// The completion thread of the scheduler it was opened through.
    completions: Arc<Completions>,
}

/// Memory aligned for O_DIRECT. One thread at a time.
pub struct tg_buffer {
    buffer: AlignedBuffer,
}

/// A completion queue: completions of asynchronous requests that named it,
/// and an eventfd that counts them. Thread-safe.
pub struct tg_queue {
    queue: Arc<Queue>,
}

/// One delivered completion.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tg_completion {
    /// The `user_data` the request was submitted with.
    pub user_data: *mut c_void,
    /// Bytes transferred (reads and writes), 0 (syncs), or a negative errno.
    pub result: i64,
    /// The request's buffer, back in the caller's hands; NULL for syncs.
    pub buffer: *mut tg_buffer,
}

/// Called once per asynchronous request, on the scheduler's completion
/// thread: `result` as in `tg_completion`, and the request's buffer (NULL
/// for syncs), back in the caller's hands.
pub type tg_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, result: i64, buffer: *mut tg_buffer)>;

/// Where an asynchronous request's completion goes: set exactly one of
/// `callback` and `queue`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tg_notify {
    /// Called with the result (on the scheduler's completion thread).
    pub callback: tg_callback,
    /// Or: the queue the completion is appended to.
    pub queue: *mut tg_queue,
    /// Handed back with the completion.
    pub user_data: *mut c_void,
}

/// One class's counters, from `tg_class_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tg_class_counters {
    /// Requests completed.
    pub ops: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Requests that completed with an error.
    pub errors: u64,
    /// Total time queued in the scheduler, nanoseconds.
    pub queue_wait_ns_total: u64,
    /// Total device time, nanoseconds.
    pub device_time_ns_total: u64,
    /// Median latency (submission to completion), nanoseconds.
    pub latency_ns_p50: u64,
    /// 99th percentile latency, nanoseconds.
    pub latency_ns_p99: u64,
    /// Largest latency, nanoseconds.
    pub latency_ns_max: u64,
}

// ---------------------------------------------------------------- errors

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // During the thread's teardown (a C thread-key destructor calling a
    // failing function) the message is lost rather than a panic aborting.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// The errno that stands for `error`: the kernel's for a failed request,
/// the one of the library's [`tailguard::Error`] it carries, else one for its
/// [`io::ErrorKind`].
fn errno_of(error: &io::Error) -> c_int {
    if let Some(errno) = tailguard::os_error_code(error) {
        return errno;
    }
    let library = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tailguard::Error>())
        .and_then(errno_of_library);
    if let Some(errno) = library {
        return errno;
    }
    match error.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => libc::EINVAL,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::AddrInUse => libc::EADDRINUSE,
        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        // The engine's only error of this kind: a request cancelled before it
        // reached the device (`tg_scheduler_cancel_pending`).
        io::ErrorKind::Interrupted => libc::ECANCELED,
        _ if error.to_string().contains("shut down") => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

/// The errno for a kind of the library's error; `None` leaves it to the
/// [`io::ErrorKind`] the error carries.
fn errno_of_library(error: &tailguard::Error) -> Option<c_int> {
    use tailguard::ErrorKind;
    match error.kind() {
        ErrorKind::Request { errno, .. } => Some(*errno),
        ErrorKind::MisalignedOffset { .. }
        | ErrorKind::MisalignedLength { .. }
        | ErrorKind::MisalignedPointer { .. }
        | ErrorKind::AlignmentNotPowerOfTwo { .. }
        | ErrorKind::ProfileFile { .. }
        | ErrorKind::InvalidConfig { .. } => Some(libc::EINVAL),
        ErrorKind::BufferTooLarge { .. } | ErrorKind::OutOfMemory { .. } => Some(libc::ENOMEM),
        _ => None,
    }
}

fn fail(error: &io::Error) -> i64 {
    set_last_error(&error.to_string());
    -i64::from(errno_of(error))
}

/// Frees a handle that was boxed for C; NULL is ignored. A panic in its
/// drop is caught and reported through `tg_last_error`.
///
/// # Safety
/// `handle` is NULL or came from `Box::into_raw`, is live, and no thread
/// uses it afterwards.
unsafe fn free_handle<T>(handle: *mut T) {
    if handle.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: a live boxed handle, given up by the caller.
        drop(unsafe { Box::from_raw(handle) });
        Ok(0)
    });
}

/// Runs an entry point's body: its value, or a negative errno with the
/// message left for `tg_last_error`; a panic becomes `-EIO`.
fn guard(body: impl FnOnce() -> io::Result<i64>) -> i64 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => fail(&error),
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last_error(&format!("tailguard: internal error (a bug): {text}"));
            -i64::from(libc::EIO)
        }
    }
}

fn guard_int(body: impl FnOnce() -> io::Result<i64>) -> c_int {
    guard(body) as c_int
}

fn null_argument(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("tailguard: `{name}` is NULL; pass a valid pointer"),
    )
}

/// `pointer` as a reference, or an error naming the argument.
///
/// # Safety
/// `pointer` is NULL or points to a live `T` that nothing mutates meanwhile.
unsafe fn reference<'a, T>(pointer: *const T, name: &str) -> io::Result<&'a T> {
    // SAFETY: the caller's contract: NULL or a live, unaliased-for-writes T.
    unsafe { pointer.as_ref() }.ok_or_else(|| null_argument(name))
}

/// `pointer` as a mutable reference, or an error naming the argument.
///
/// # Safety
/// `pointer` is NULL or points to a live `T` that nobody else uses meanwhile.
unsafe fn mutable<'a, T>(pointer: *mut T, name: &str) -> io::Result<&'a mut T> {
    // SAFETY: the caller's contract: NULL or a live T used by us alone.
    unsafe { pointer.as_mut() }.ok_or_else(|| null_argument(name))
}

/// The file and class handles every request names, or an error naming the
/// NULL one.
///
/// # Safety
/// `file` and `class` are NULL or live handles.
unsafe fn request_handles<'a>(
    file: *const tg_file,
    class: *const tg_class,
) -> io::Result<(&'a tg_file, &'a tg_class)> {
    // SAFETY: the caller's contract: NULL or live handles.
    unsafe { Ok((reference(file, "file")?, reference(class, "class")?)) }
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string.
unsafe fn string<'a>(text: *const c_char, name: &str) -> io::Result<&'a str> {
    if text.is_null() {
        return Err(null_argument(name));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(text) }.to_str().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tailguard: `{name}` is not UTF-8"),
        )
    })
}

/// Stores `value` in `*out` as a fresh heap handle.
///
/// # Safety
/// `out` is NULL or valid for a pointer-sized write.
unsafe fn hand_out<T>(out: *mut *mut T, value: T) -> io::Result<i64> {
    if out.is_null() {
        return Err(null_argument("out"));
    }
    // SAFETY: checked non-NULL; valid for writes by the caller's contract.
    unsafe { out.write(Box::into_raw(Box::new(value))) };
    Ok(0)
}

/// The message of the last failed call on this thread ("" if none). The
/// pointer stays valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn tg_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

// ------------------------------------------------------------- scheduler

/// Fills the `size` bytes at `options` with the defaults, `size` field
/// included: pass `sizeof options`. Writes nothing past `size` bytes (a
/// header older than the library has a smaller struct). Returns 0, or
/// -EINVAL for NULL or a size that no version of the struct has.
///
/// # Safety
/// `options` is NULL or points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tg_scheduler_options_init(
    options: *mut tg_scheduler_options,
    size: usize,
) -> c_int {
    guard_int(|| {
        if options.is_null() {
            return Err(null_argument("options"));
        }
        check_options_size(size)?;
        let defaults = default_options(size);
        let known = std::mem::size_of::<tg_scheduler_options>();
        let bytes = options.cast::<u8>();
        // SAFETY: `size` bytes at `options` are writable by the caller's
        // contract; the copy takes at most `known` bytes of `defaults` (an
        // untyped copy, padding included) and the rest of `size` is zeroed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&defaults).cast::<u8>(),
                bytes,
                size.min(known),
            );
            if size > known {
                bytes.add(known).write_bytes(0, size - known);
            }
        }
        Ok(0)
    })
}

/// The defaults, for a caller whose struct is `size` bytes.
fn default_options(size: usize) -> tg_scheduler_options {
    tg_scheduler_options {
        size,
        latency_target_us: 0,
        ring_depth: 0,
        threads: 0,
        backend: TG_BACKEND_AUTO,
        controller: TG_CONTROLLER_FIXED,
        waiters_run_engine: true,
        eager_submit: true,
        registered_files: TG_REGISTERED_FILES_DEFAULT,
        profile_file: std::ptr::null(),
        engine_linger_us: 0,
    }
}

/// Where each field of `tg_scheduler_options` ends: the sizes an older
/// version of the struct can have (versions only ever add fields at the end).
const OPTIONS_FIELD_ENDS: [usize; 11] = {
    use std::mem::{offset_of, size_of};
    type Options = tg_scheduler_options;
    [
        offset_of!(Options, size) + size_of::<usize>(),
        offset_of!(Options, latency_target_us) + size_of::<u64>(),
        offset_of!(Options, ring_depth) + size_of::<u32>(),
        offset_of!(Options, threads) + size_of::<u32>(),
        offset_of!(Options, backend) + size_of::<u32>(),
        offset_of!(Options, controller) + size_of::<u32>(),
        offset_of!(Options, waiters_run_engine) + size_of::<bool>(),
        offset_of!(Options, eager_submit) + size_of::<bool>(),
        offset_of!(Options, registered_files) + size_of::<u32>(),
        offset_of!(Options, profile_file) + size_of::<*const c_char>(),
        offset_of!(Options, engine_linger_us) + size_of::<u64>(),
    ]
};

/// Refuses a struct size that no version of `tg_scheduler_options` has: at
/// most this library's size, it ends at one of its fields' ends; larger, it
/// is a newer header's (checked for unknown fields when read).
fn check_options_size(size: usize) -> io::Result<()> {
    let known = std::mem::size_of::<tg_scheduler_options>();
    let newer = size > known
        && size <= OPTIONS_SIZE_MAX
        && size % std::mem::align_of::<tg_scheduler_options>() == 0;
    if newer || OPTIONS_FIELD_ENDS.contains(&size) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "tailguard: tg_scheduler_options of {size} bytes is no version of the struct; \
             fill the options with tg_scheduler_options_init(&options, sizeof options) first"
        ),
    ))
}

/// The largest options struct a newer header may have (room for hundreds of
/// fields): a larger size, or one that is no multiple of the struct's
/// alignment, is a `size` field never filled by `tg_scheduler_options_init`,
/// refused rather than zeroed or read that far.
const OPTIONS_SIZE_MAX: usize = 4096;

/// The caller's options, read as far as its struct goes (its `size`), with
/// the defaults for fields its header does not have.
///
/// # Safety
/// `options` points to a struct filled by `tg_scheduler_options_init`: its
/// first field is its size in bytes, and that many bytes are readable.
unsafe fn read_options(options: *const tg_scheduler_options) -> io::Result<tg_scheduler_options> {
    // SAFETY: the first field, readable by the caller's contract.
    let size = unsafe { options.cast::<usize>().read() };
    check_options_size(size)?;
    let known = std::mem::size_of::<tg_scheduler_options>();
    let bytes = options.cast::<u8>();
    if size > known {
        // SAFETY: `size` bytes are readable by the caller's contract.
        let newer = unsafe { std::slice::from_raw_parts(bytes.add(known), size - known) };
        if newer.iter().any(|&byte| byte != 0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "tailguard: the options set fields this library does not know (its header is \
                 newer than the library); link the library that matches include/tailguard.h",
            ));
        }
    }
    let mut read = default_options(known);
    // SAFETY: `size.min(known)` bytes are readable at `options` and fit in
    // `read`; they end at a field's end (checked), so every field is either
    // the caller's whole or the default.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes,
            std::ptr::from_mut(&mut read).cast::<u8>(),
            size.min(known),
        );
    }
    read.size = known;
    Ok(read)
}

fn builder_from(options: &tg_scheduler_options) -> io::Result<tailguard::SchedulerBuilder> {
    let invalid = |what: &str, value: u32| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tailguard: unknown {what} {value}; use one of the TG_{what}_* constants"),
        )
    };
    let mut builder = Scheduler::builder()
        .backend(match options.backend {
            TG_BACKEND_AUTO => BackendChoice::Auto,
            TG_BACKEND_IO_URING => BackendChoice::IoUring,
            TG_BACKEND_THREADS => BackendChoice::Threads,
            other => return Err(invalid("BACKEND", other)),
        })
        .controller(match options.controller {
            TG_CONTROLLER_FIXED => ControllerChoice::Fixed,
            TG_CONTROLLER_ADAPTIVE => ControllerChoice::Adaptive,
            other => return Err(invalid("CONTROLLER", other)),
        })
        .waiters_run_engine(options.waiters_run_engine)
        .eager_submit(options.eager_submit);
    if options.latency_target_us > 0 {
        builder = builder.latency_target(Duration::from_micros(options.latency_target_us));
    }
    if options.ring_depth > 0 {
        builder = builder.ring_depth(options.ring_depth);
    }
    if options.threads > 0 {
        builder = builder.threads(options.threads as usize);
    }
    if options.registered_files != TG_REGISTERED_FILES_DEFAULT {
        builder = builder.registered_files(options.registered_files);
    }
    builder = match options.engine_linger_us {
        0 => builder,
        TG_ENGINE_LINGER_OFF => builder.engine_linger(Duration::ZERO),
        linger_us => builder.engine_linger(Duration::from_micros(linger_us)),
    };
    if !options.profile_file.is_null() {
        // SAFETY: non-NULL; a NUL-terminated string by the header's contract.
        let path = unsafe { string(options.profile_file, "profile_file") }?;
        builder = builder.profile_file(path)?;
    }
    Ok(builder)
}

/// Builds a scheduler and stores it in `*out`. `options` may be NULL for
/// the defaults. Returns 0 or a negative errno.
///
/// # Safety
/// `options` is NULL or points to options filled by
/// `tg_scheduler_options_init`; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tg_scheduler_new(
    options: *const tg_scheduler_options,
    out: *mut *mut tg_scheduler,
) -> c_int {
    guard_int(|| {
        let builder = if options.is_null() {
            Scheduler::builder()
        } else {
            // SAFETY: non-NULL options filled by `tg_scheduler_options_init`,
            // by the caller's contract.
            builder_from(&unsafe { read_options(options) }?)?
        };
        let scheduler = builder.build()?;
        let completions = Arc::new(Completions::start()?);
        // SAFETY: `out` valid for a write by the caller's contract.
        unsafe {
            hand_out(
                out,
                tg_scheduler {
                    scheduler,
                    completions,
                },
            )
        }
    })
}

/// Shuts the scheduler down and frees it: requests already accepted
/// complete, and every asynchronous completion is delivered before it
/// returns. Classes and files of this scheduler must still be freed; their
/// requests fail with -ESHUTDOWN from now on. NULL is ignored. Never call it
/// from a completion callback.
///
/// # Safety
/// `scheduler` is NULL or a handle from `tg_scheduler_new` not yet freed,
/// which no other thread uses any more.
#[no_mangle]
pub unsafe extern "C" fn tg_scheduler_free(scheduler: *mut tg_scheduler) {
    if scheduler.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: a live handle from `tg_scheduler_new`, given up by the caller.
        let handle = unsafe { Box::from_raw(scheduler) };
        handle.scheduler.shutdown();
        handle.completions.stop();
        drop(handle);
        Ok(0)
    });
}

/// Fails every request accepted so far and not yet handed to the kernel
/// with -ECANCELED (asynchronous ones through their callback or queue), and
/// keeps the scheduler running: requests made afterwards are served. A
/// request of which part is at the device already completes when that part
/// does, with the bytes transferred from its start. Call it before
/// `tg_scheduler_free` to stop without serving a backlog. Returns how many
/// requests it cancelled, whole or in part, or a negative errno. Never call
/// it from a completion callback.
///
/// # Safety
/// `scheduler` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_scheduler_cancel_pending(scheduler: *const tg_scheduler) -> i64 {
    guard(|| {
        // SAFETY: a live handle by the caller's contract.
        let scheduler = unsafe { reference(scheduler, "scheduler") }?;
        let cancelled = scheduler.scheduler.cancel_pending()?;
        Ok(i64::try_from(cancelled).unwrap_or(i64::MAX))
    })
}

// --------------------------------------------------------------- classes

/// Adds a class named `name` with `shares` (1..=10000) and stores its
/// handle in `*out`. Returns 0 or a negative errno.
///
/// # Safety
/// `scheduler` is a live handle; `name` a NUL-terminated string; `out`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tg_class_new(
    scheduler: *const tg_scheduler,
    name: *const c_char,
    shares: u32,
    out: *mut *mut tg_class,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handle, C string).
        let (scheduler, name) =
            unsafe { (reference(scheduler, "scheduler")?, string(name, "name")?) };
        let class = scheduler.scheduler.add_class(name, shares)?;
        // SAFETY: `out` valid for a write by the caller's contract.
        unsafe { hand_out(out, tg_class { class }) }
    })
}

/// Changes a class's shares (1..=10000). Returns 0 or a negative errno.
///
/// # Safety
/// `class` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_class_set_shares(class: *const tg_class, shares: u32) -> c_int {
    guard_int(|| {
        // SAFETY: a live handle by the caller's contract.
        unsafe { reference(class, "class") }?
            .class
            .set_shares(shares)?;
        Ok(0)
    })
}

/// Sets or lifts a class's rate limit: at most `bytes_per_s` bytes and
/// `iops` requests per second on each device it uses (0: that dimension is
/// not capped; both 0: no limit), with `burst_ns` nanoseconds of the rate
/// that an idle class may spend at once (0: the default, 20 ms). Returns 0 or
/// a negative errno (`-EINVAL` for a burst over an hour).
///
/// # Safety
/// `class` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_class_set_rate_limit(
    class: *const tg_class,
    bytes_per_s: u64,
    iops: u64,
    burst_ns: u64,
) -> c_int {
    guard_int(|| {
        let limit = match (bytes_per_s, iops) {
            (0, 0) => None,
            (0, iops) => Some(tailguard::RateLimit::iops(iops)),
            (bytes_per_s, 0) => Some(tailguard::RateLimit::bytes_per_s(bytes_per_s)),
            (bytes_per_s, iops) => {
                Some(tailguard::RateLimit::bytes_per_s(bytes_per_s).with_iops(iops))
            }
        }
        .map(|limit| match burst_ns {
            0 => limit,
            burst_ns => limit.with_burst_ns(burst_ns),
        });
        // SAFETY: a live handle by the caller's contract.
        unsafe { reference(class, "class") }?
            .class
            .set_rate_limit(limit)?;
        Ok(0)
    })
}

/// Removes the class from the scheduler and frees the handle. Requests
/// already submitted complete. Returns 0 or a negative errno (the handle is
/// freed either way).
///
/// # Safety
/// `class` is a live handle, not used by any thread afterwards.
#[no_mangle]
pub unsafe extern "C" fn tg_class_remove(class: *mut tg_class) -> c_int {
    guard_int(|| {
        if class.is_null() {
            return Err(null_argument("class"));
        }
        // SAFETY: a live handle, given up by the caller.
        let handle = unsafe { Box::from_raw(class) };
        handle.class.remove()?;
        Ok(0)
    })
}

/// Frees the handle; the class stays in the scheduler. NULL is ignored.
///
/// # Safety
/// `class` is NULL or a live handle, not used by any thread afterwards.
#[no_mangle]
pub unsafe extern "C" fn tg_class_free(class: *mut tg_class) {
    // SAFETY: the caller's contract (above) is `free_handle`'s.
    unsafe { free_handle(class) };
}

/// The counters of the class named `name` into `*out`. Returns 0, -ENOENT
/// if no class has that name, or another negative errno.
///
/// # Safety
/// `scheduler` is a live handle; `name` a NUL-terminated string; `out`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tg_class_stats(
    scheduler: *const tg_scheduler,
    name: *const c_char,
    out: *mut tg_class_counters,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handle, C string, writable out).
        let (scheduler, name, out) = unsafe {
            (
                reference(scheduler, "scheduler")?,
                string(name, "name")?,
                mutable(out, "out")?,
            )
        };
        let stats = scheduler.scheduler.stats()?;
        let class = stats.class(name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("tailguard: no class named `{name}`"),
            )
        })?;
        *out = tg_class_counters {
            ops: class.ops,
            bytes: class.bytes,
            errors: class.errors,
            queue_wait_ns_total: class.queue_wait_ns.sum_ns(),
            device_time_ns_total: class.device_time_ns.sum_ns(),
            latency_ns_p50: class.latency_ns.value_at_quantile(0.5),
            latency_ns_p99: class.latency_ns.value_at_quantile(0.99),
            latency_ns_max: class.latency_ns.max(),
        };
        Ok(0)
    })
}

// ----------------------------------------------------------------- files

/// Opens `path` through the scheduler with `flags` (`TG_OPEN_*`, or'ed;
/// O_DIRECT unless `TG_OPEN_BUFFERED`) and stores the handle in `*out`.
/// Returns 0 or a negative errno (-EINVAL with a message naming the fix
/// where the filesystem refuses O_DIRECT, or for a bit that is no
/// `TG_OPEN_*` flag).
///
/// # Safety
/// `scheduler` is a live handle; `path` a NUL-terminated string; `out`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn tg_file_open(
    scheduler: *const tg_scheduler,
    path: *const c_char,
    flags: u32,
    out: *mut *mut tg_file,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handle, C string).
        let (scheduler, path) =
            unsafe { (reference(scheduler, "scheduler")?, string(path, "path")?) };
        let known =
            TG_OPEN_READ | TG_OPEN_WRITE | TG_OPEN_CREATE | TG_OPEN_TRUNCATE | TG_OPEN_BUFFERED;
        if flags & !known != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tailguard: open flags {:#x} are no TG_OPEN_* flag of this library; \
                     pass only TG_OPEN_* values, or link the library that matches \
                     include/tailguard.h",
                    flags & !known
                ),
            ));
        }
        let file = OpenOptions::new()
            .read(flags & TG_OPEN_READ != 0)
            .write(flags & TG_OPEN_WRITE != 0)
            .create(flags & TG_OPEN_CREATE != 0)
            .truncate(flags & TG_OPEN_TRUNCATE != 0)
            .direct(flags & TG_OPEN_BUFFERED == 0)
            .open(&scheduler.scheduler, path)?;
        let completions = scheduler.completions.clone();
        // SAFETY: `out` valid for a write by the caller's contract.
        unsafe { hand_out(out, tg_file { file, completions }) }
    })
}

/// The alignment O_DIRECT needs: of buffer addresses (`*memory_bytes`) and
/// of offsets and lengths (`*offset_bytes`). Returns 0 or a negative errno.
///
/// # Safety
/// `file` is a live handle; the outputs are valid for writes.
#[no_mangle]
pub unsafe extern "C" fn tg_file_alignment(
    file: *const tg_file,
    memory_bytes: *mut u32,
    offset_bytes: *mut u32,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handle, writable outputs).
        let (file, memory, offset) = unsafe {
            (
                reference(file, "file")?,
                mutable(memory_bytes, "memory_bytes")?,
                mutable(offset_bytes, "offset_bytes")?,
            )
        };
        let alignment = file.file.alignment();
        *memory = alignment.memory_bytes;
        *offset = alignment.offset_bytes;
        Ok(0)
    })
}

/// Closes the file once no request on it is left, and frees the handle.
/// NULL is ignored.
///
/// # Safety
/// `file` is NULL or a live handle, not used by any thread afterwards.
#[no_mangle]
pub unsafe extern "C" fn tg_file_close(file: *mut tg_file) {
    // SAFETY: the caller's contract (above) is `free_handle`'s.
    unsafe { free_handle(file) };
}

// --------------------------------------------------------------- buffers

/// A zeroed buffer of `length` bytes whose address is a multiple of
/// `alignment` (a power of two; 4096 suits every device), or NULL with the
/// message in `tg_last_error`.
#[no_mangle]
pub extern "C" fn tg_buffer_new(length: usize, alignment: usize) -> *mut tg_buffer {
    let mut handle = std::ptr::null_mut();
    guard(|| {
        let buffer = AlignedBuffer::new(length, alignment)?;
        handle = Box::into_raw(Box::new(tg_buffer { buffer }));
        Ok(0)
    });
    handle
}

/// The buffer's memory (`tg_buffer_length` bytes), or NULL for NULL.
///
/// # Safety
/// `buffer` is NULL or a live handle held by the caller (not in flight).
#[no_mangle]
pub unsafe extern "C" fn tg_buffer_data(buffer: *mut tg_buffer) -> *mut u8 {
    // SAFETY: NULL or a live handle the caller holds.
    match unsafe { buffer.as_mut() } {
        Some(handle) => handle.buffer.as_mut_ptr(),
        None => std::ptr::null_mut(),
    }
}

/// The buffer's length in bytes (0 for NULL).
///
/// # Safety
/// `buffer` is NULL or a live handle held by the caller (not in flight).
#[no_mangle]
pub unsafe extern "C" fn tg_buffer_length(buffer: *const tg_buffer) -> usize {
    // SAFETY: NULL or a live handle the caller holds.
    unsafe { buffer.as_ref() }.map_or(0, |handle| handle.buffer.len())
}

/// Frees the buffer. NULL is ignored.
///
/// # Safety
/// `buffer` is NULL or a live handle held by the caller (not in flight),
/// not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn tg_buffer_free(buffer: *mut tg_buffer) {
    // SAFETY: the caller's contract (above) is `free_handle`'s.
    unsafe { free_handle(buffer) };
}

// ------------------------------------------------------ blocking requests

#[derive(Clone, Copy)]
enum DataKind {
    Read,
    Write,
}

impl DataKind {
    /// Starts the request: the buffer goes to the library until it completes.
    fn start(
        self,
        file: &tg_file,
        class: &tg_class,
        data: AlignedBuffer,
        offset: u64,
    ) -> IoFuture<BufResult> {
        match self {
            Self::Read => file.file.read_at(&class.class, data, offset),
            Self::Write => file.file.write_at(&class.class, data, offset),
        }
    }
}

/// Takes the buffer out of its handle for a request, leaving an empty one
/// until the request hands it back.
fn take_buffer(handle: &mut tg_buffer) -> AlignedBuffer {
    std::mem::replace(&mut handle.buffer, AlignedBuffer::new(0, 1).expect("empty"))
}

/// # Safety
/// The pointers are live handles; `buffer` is held by the caller.
unsafe fn blocking_data(
    kind: DataKind,
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
) -> i64 {
    guard(|| {
        // SAFETY: the caller's contract (live handles, buffer held by it).
        let ((file, class), handle) =
            unsafe { (request_handles(file, class)?, mutable(buffer, "buffer")?) };
        let (result, buffer) = kind.start(file, class, take_buffer(handle), offset).wait();
        handle.buffer = buffer;
        Ok(result? as i64)
    })
}

/// Reads `tg_buffer_length(buffer)` bytes at `offset` into the buffer and
/// waits. Returns the bytes read (fewer at the end of the file) or a
/// negative errno. The buffer's address, its length and `offset` must be
/// aligned as `tg_file_alignment` says (unless opened `TG_OPEN_BUFFERED`).
///
/// # Safety
/// `file` and `class` are live handles; `buffer` a live handle the caller
/// holds, used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn tg_read(
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
) -> i64 {
    // SAFETY: forwarded caller's contract.
    unsafe { blocking_data(DataKind::Read, file, class, buffer, offset) }
}

/// Writes the buffer at `offset` and waits. Returns the bytes written or a
/// negative errno. Alignment as for `tg_read`.
///
/// # Safety
/// As for `tg_read`.
#[no_mangle]
pub unsafe extern "C" fn tg_write(
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
) -> i64 {
    // SAFETY: forwarded caller's contract.
    unsafe { blocking_data(DataKind::Write, file, class, buffer, offset) }
}

/// `fdatasync` through the scheduler, waiting. Returns 0 or a negative
/// errno.
///
/// # Safety
/// `file` and `class` are live handles.
#[no_mangle]
pub unsafe extern "C" fn tg_fdatasync(file: *const tg_file, class: *const tg_class) -> c_int {
    guard_int(|| {
        // SAFETY: live handles by the caller's contract.
        let (file, class) = unsafe { request_handles(file, class) }?;
        file.file.fdatasync(&class.class).wait()?;
        Ok(0)
    })
}

// ---------------------------------------------------------- async requests

/// A raw pointer that crosses to the completion thread; the C caller's
/// contract (handed back untouched) makes that sound.
#[derive(Clone, Copy)]
struct SendPointer(*mut c_void);

// SAFETY: the pointer is only carried and handed back to C, never
// dereferenced by Rust.
unsafe impl Send for SendPointer {}

enum Notify {
    Callback(
        unsafe extern "C" fn(*mut c_void, i64, *mut tg_buffer),
        SendPointer,
    ),
    Queue(Arc<Queue>, SendPointer),
}

/// What an asynchronous request ends with.
struct Outcome {
    result: i64,
    buffer: Option<Box<tg_buffer>>,
}

type OutcomeFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// One asynchronous request, polled by the completion thread.
struct Task {
    future: Mutex<Option<OutcomeFuture>>,
    notify: Mutex<Option<Notify>>,
    wakeups: mpsc::Sender<Wakeup>,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        let _ = self.wakeups.clone().send(Wakeup::Poll(self));
    }
}

enum Wakeup {
    Poll(Arc<Task>),
    /// `outstanding` went down without a delivery.
    Recount,
    Stop,
}

/// The completion thread of a scheduler; see the module docs.
struct Completions {
    wakeups: mpsc::Sender<Wakeup>,
    outstanding: Arc<AtomicUsize>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set once the scheduler is freed. Its lock also covers each request's
    /// count in `outstanding`, so a request counted in before `stop` is
    /// always waited for.
    stopped: Mutex<bool>,
}

impl Completions {
    fn start() -> io::Result<Self> {
        let (wakeups, received) = mpsc::channel();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let counted = outstanding.clone();
        let thread = std::thread::Builder::new()
            .name("tailguard-ffi-completions".into())
            .spawn(move || run_completions(&received, &counted))?;
        Ok(Self {
            wakeups,
            outstanding,
            thread: Mutex::new(Some(thread)),
            stopped: Mutex::new(false),
        })
    }

    /// Counts a request in before it starts, or refuses it once the
    /// scheduler is freed. The check and the count are one step under the
    /// `stopped` lock: the completion thread ends only when the count is
    /// zero after `stop`, so it never leaves a request that passed the check
    /// undelivered.
    fn admit(&self) -> io::Result<Admitted<'_>> {
        let stopped = self.stopped.lock().expect("lock poisoned");
        if *stopped {
            return Err(io::Error::from_raw_os_error(libc::ESHUTDOWN));
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        Ok(Admitted {
            completions: self,
            submitted: false,
        })
    }
}

/// A request counted in by [`Completions::admit`], to be submitted.
struct Admitted<'a> {
    completions: &'a Completions,
    submitted: bool,
}

impl Admitted<'_> {
    /// Hands the request to the completion thread.
    fn submit(mut self, future: OutcomeFuture, notify: Notify) {
        self.submitted = true;
        let completions = self.completions;
        let task = Arc::new(Task {
            future: Mutex::new(Some(future)),
            notify: Mutex::new(Some(notify)),
            wakeups: completions.wakeups.clone(),
        });
        // The first poll registers the waker.
        let _ = completions.wakeups.send(Wakeup::Poll(task));
    }
}

impl Drop for Admitted<'_> {
    /// A request counted in but never submitted (a panic between) is counted
    /// out again, and the completion thread told to look at the count.
    fn drop(&mut self) {
        if !self.submitted {
            self.completions.outstanding.fetch_sub(1, Ordering::AcqRel);
            let _ = self.completions.wakeups.send(Wakeup::Recount);
        }
    }
}

impl Completions {
    /// Delivers every outstanding completion, then ends the thread.
    fn stop(&self) {
        if std::mem::replace(&mut *self.stopped.lock().expect("lock poisoned"), true) {
            return;
        }
        let _ = self.wakeups.send(Wakeup::Stop);
        if let Some(thread) = self.thread.lock().expect("lock poisoned").take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run_completions(wakeups: &mpsc::Receiver<Wakeup>, outstanding: &AtomicUsize) {
    let mut stopping = false;
    while !(stopping && outstanding.load(Ordering::Acquire) == 0) {
        match wakeups.recv() {
            Ok(Wakeup::Poll(task)) => {
                if poll_task(&task) {
                    outstanding.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Ok(Wakeup::Recount) => {}
            Ok(Wakeup::Stop) => stopping = true,
            Err(_) => break,
        }
    }
}

/// Polls `task` once; delivers and returns true when it is done.
fn poll_task(task: &Arc<Task>) -> bool {
    let mut slot = task.future.lock().expect("lock poisoned");
    let Some(future) = slot.as_mut() else {
        return false; // a late wake-up of a delivered task
    };
    let waker = Waker::from(task.clone());
    let Poll::Ready(outcome) = future.as_mut().poll(&mut Context::from_waker(&waker)) else {
        return false;
    };
    *slot = None;
    drop(slot);
    let notify = task.notify.lock().expect("lock poisoned").take();
    if let Some(notify) = notify {
        deliver(notify, outcome);
    }
    true
}

fn deliver(notify: Notify, outcome: Outcome) {
    let buffer = outcome.buffer.map_or(std::ptr::null_mut(), Box::into_raw);
    match notify {
        Notify::Callback(callback, user_data) => {
            // SAFETY: the caller's function, called as the header documents,
            // with the pointer it gave and the buffer it now owns again.
            unsafe { callback(user_data.0, outcome.result, buffer) };
        }
        Notify::Queue(queue, user_data) => queue.push(tg_completion {
            user_data: user_data.0,
            result: outcome.result,
            buffer,
        }),
    }
}

/// The queue behind a `tg_queue` handle.
struct Queue {
    completions: Mutex<VecDeque<SendCompletion>>,
    eventfd: OwnedFd,
    /// The handle was freed: nobody will poll; buffers are freed instead.
    closed: AtomicBool,
}

struct SendCompletion(tg_completion);

// SAFETY: the pointers inside are handed back to C untouched, except the
// buffer of a closed queue, which Rust owns again and frees.
unsafe impl Send for SendCompletion {}

impl Queue {
    fn push(&self, completion: tg_completion) {
        // `closed` is read and set under the lock, so a completion is either
        // in the queue before `tg_queue_free` drains it, or freed here.
        let mut completions = self.completions.lock().expect("lock poisoned");
        if self.closed.load(Ordering::Acquire) {
            drop(completions);
            free_buffer(completion);
            return;
        }
        completions.push_back(SendCompletion(completion));
        drop(completions);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Marks the queue closed and frees what waits in it.
    fn close(&self) {
        let left: Vec<SendCompletion> = {
            let mut completions = self.completions.lock().expect("lock poisoned");
            self.closed.store(true, Ordering::Release);
            completions.drain(..).collect()
        };
        for SendCompletion(completion) in left {
            free_buffer(completion);
        }
    }
}

/// Frees the buffer of a completion that no caller will receive.
fn free_buffer(completion: tg_completion) {
    if !completion.buffer.is_null() {
        // SAFETY: the buffer came back from the engine and was never handed
        // to the caller, who cannot receive it any more.
        drop(unsafe { Box::from_raw(completion.buffer) });
    }
}

/// A completion queue, or NULL with the message in `tg_last_error`.
#[no_mangle]
pub extern "C" fn tg_queue_new() -> *mut tg_queue {
    let mut handle = std::ptr::null_mut();
    guard(|| {
        // SAFETY: eventfd has no memory arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        let queue = Arc::new(Queue {
            completions: Mutex::new(VecDeque::new()),
            eventfd,
            closed: AtomicBool::new(false),
        });
        handle = Box::into_raw(Box::new(tg_queue { queue }));
        Ok(0)
    });
    handle
}

/// The queue's eventfd (non-blocking): readable while completions may be
/// waiting. Read it (8 bytes) to reset it, then call `tg_queue_poll` until
/// it returns 0. The queue owns the descriptor; don't close it. Returns -1
/// for NULL.
///
/// # Safety
/// `queue` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_queue_fd(queue: *const tg_queue) -> c_int {
    // SAFETY: NULL or a live handle.
    unsafe { queue.as_ref() }.map_or(-1, |handle| handle.queue.eventfd.as_raw_fd())
}

/// Moves up to `capacity` completions into `out` without blocking; returns
/// how many (0 when none waits) or a negative errno.
///
/// # Safety
/// `queue` is a live handle; `out` is valid for `capacity` writes.
#[no_mangle]
pub unsafe extern "C" fn tg_queue_poll(
    queue: *const tg_queue,
    out: *mut tg_completion,
    capacity: usize,
) -> c_int {
    guard_int(|| {
        // SAFETY: a live handle by the caller's contract.
        let queue = unsafe { reference(queue, "queue") }?;
        if out.is_null() && capacity > 0 {
            return Err(null_argument("out"));
        }
        let mut completions = queue.queue.completions.lock().expect("lock poisoned");
        let count = capacity.min(completions.len()).min(c_int::MAX as usize);
        for index in 0..count {
            let SendCompletion(completion) = completions.pop_front().expect("counted");
            // SAFETY: index < capacity, and `out` is valid for that many.
            unsafe { out.add(index).write(completion) };
        }
        Ok(count as i64)
    })
}

/// Frees the queue. Completions still waiting in it, and those of requests
/// that complete later, are dropped and their buffers freed. NULL is
/// ignored.
///
/// # Safety
/// `queue` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn tg_queue_free(queue: *mut tg_queue) {
    if queue.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: a live handle, given up by the caller.
        let handle = unsafe { Box::from_raw(queue) };
        handle.queue.close();
        Ok(0)
    });
}

/// # Safety
/// `notify` is NULL or points to a `tg_notify` whose queue is live.
unsafe fn notify_from(notify: *const tg_notify) -> io::Result<Notify> {
    // SAFETY: the caller's contract.
    let notify = unsafe { reference(notify, "notify") }?;
    let user_data = SendPointer(notify.user_data);
    // SAFETY: NULL or a live queue by the caller's contract.
    match (notify.callback, unsafe { notify.queue.as_ref() }) {
        (Some(callback), None) => Ok(Notify::Callback(callback, user_data)),
        (None, Some(queue)) => Ok(Notify::Queue(queue.queue.clone(), user_data)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "tailguard: set exactly one of tg_notify.callback and tg_notify.queue",
        )),
    }
}

/// # Safety
/// As for `tg_read_async`.
unsafe fn async_data(
    kind: DataKind,
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
    notify: *const tg_notify,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handles, valid notify).
        let ((file, class), notify) =
            unsafe { (request_handles(file, class)?, notify_from(notify)?) };
        if buffer.is_null() {
            return Err(null_argument("buffer"));
        }
        let admitted = file.completions.admit()?;
        // SAFETY: a live handle the caller gives to the library until the
        // completion hands it back.
        let mut handle = unsafe { Box::from_raw(buffer) };
        let request = kind.start(file, class, take_buffer(&mut handle), offset);
        admitted.submit(
            Box::pin(async move {
                let (result, data) = request.await;
                handle.buffer = data;
                Outcome {
                    result: result.map_or_else(|error| -i64::from(errno_of(&error)), |n| n as i64),
                    buffer: Some(handle),
                }
            }),
            notify,
        );
        Ok(0)
    })
}

/// Starts a read of `tg_buffer_length(buffer)` bytes at `offset` and returns
/// at once: 0, or a negative errno when nothing was started (the buffer
/// then stays the caller's). The result and the buffer arrive through
/// `notify`; until then the buffer is the library's (don't touch or free
/// it). Alignment as for `tg_read`.
///
/// # Safety
/// `file` and `class` are live handles; `buffer` a live handle the caller
/// holds; `notify` points to a valid `tg_notify` (read during the call).
#[no_mangle]
pub unsafe extern "C" fn tg_read_async(
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
    notify: *const tg_notify,
) -> c_int {
    // SAFETY: forwarded caller's contract.
    unsafe { async_data(DataKind::Read, file, class, buffer, offset, notify) }
}

/// Starts a write of the buffer at `offset`; otherwise as `tg_read_async`.
///
/// # Safety
/// As for `tg_read_async`.
#[no_mangle]
pub unsafe extern "C" fn tg_write_async(
    file: *const tg_file,
    class: *const tg_class,
    buffer: *mut tg_buffer,
    offset: u64,
    notify: *const tg_notify,
) -> c_int {
    // SAFETY: forwarded caller's contract.
    unsafe { async_data(DataKind::Write, file, class, buffer, offset, notify) }
}

/// Starts an `fdatasync`; its completion (result 0 or a negative errno,
/// buffer NULL) arrives through `notify`. Returns 0 or a negative errno.
///
/// # Safety
/// `file` and `class` are live handles; `notify` points to a valid
/// `tg_notify`.
#[no_mangle]
pub unsafe extern "C" fn tg_fdatasync_async(
    file: *const tg_file,
    class: *const tg_class,
    notify: *const tg_notify,
) -> c_int {
    guard_int(|| {
        // SAFETY: the caller's contract (live handles, valid notify).
        let ((file, class), notify) =
            unsafe { (request_handles(file, class)?, notify_from(notify)?) };
        let admitted = file.completions.admit()?;
        let request = file.file.fdatasync(&class.class);
        admitted.submit(
            Box::pin(async move {
                Outcome {
                    result: request
                        .await
                        .map_or_else(|error| -i64::from(errno_of(&error)), |()| 0),
                    buffer: None,
                }
            }),
            notify,
        );
        Ok(0)
    })
}

// ----------------------------------------------------------------- stats

/// The string `text` makes, for C to free with `tg_string_free`, or NULL with
/// the message in `tg_last_error`; `text` runs inside the guard, so a panic
/// in it (taking the statistics may run the engine on this thread) becomes
/// an error instead of crossing the C boundary.
fn hand_out_string(text: impl FnOnce() -> io::Result<String>) -> *mut c_char {
    let mut pointer = std::ptr::null_mut();
    guard(|| {
        let text = CString::new(text()?).map_err(|_| io::Error::other("NUL in statistics"))?;
        pointer = text.into_raw();
        Ok(0)
    });
    pointer
}

/// Every counter and histogram as JSON (the Rust `StatsSnapshot`), or NULL
/// with the message in `tg_last_error`. Free it with `tg_string_free`.
///
/// # Safety
/// `scheduler` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_stats_json(scheduler: *const tg_scheduler) -> *mut c_char {
    hand_out_string(|| {
        // SAFETY: a live handle by the caller's contract.
        let scheduler = unsafe { reference(scheduler, "scheduler") }?;
        let stats = scheduler.scheduler.stats()?;
        serde_json::to_string(&stats).map_err(io::Error::other)
    })
}

/// The metrics in the OpenMetrics text format (what a Prometheus scrape
/// reads), or NULL with the message in `tg_last_error`. Free it with
/// `tg_string_free`.
///
/// # Safety
/// `scheduler` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tg_metrics_text(scheduler: *const tg_scheduler) -> *mut c_char {
    hand_out_string(|| {
        // SAFETY: a live handle by the caller's contract.
        let scheduler = unsafe { reference(scheduler, "scheduler") }?;
        Ok(tailguard::render_openmetrics(&scheduler.scheduler.stats()?))
    })
}

/// Frees a string from `tg_stats_json` or `tg_metrics_text`. NULL is
/// ignored.
///
/// # Safety
/// `text` is NULL or a string from those functions, not freed before.
#[no_mangle]
pub unsafe extern "C" fn tg_string_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: made by `CString::into_raw` above, given back once.
        drop(unsafe { CString::from_raw(text) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_linger_field_reaches_the_builder() {
        let built_with = |linger_us| {
            let mut options = default_options(std::mem::size_of::<tg_scheduler_options>());
            options.engine_linger_us = linger_us;
            format!("{:?}", builder_from(&options).unwrap())
        };
        assert_eq!(built_with(0), format!("{:?}", Scheduler::builder()));
        let off = built_with(TG_ENGINE_LINGER_OFF);
        assert!(off.contains("engine_linger: 0ns"), "{off}");
        let set = built_with(120);
        assert!(set.contains("engine_linger: 120µs"), "{set}");
    }
}
