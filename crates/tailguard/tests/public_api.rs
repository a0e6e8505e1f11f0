//! The public API, item by item: a snapshot that the compiler checks.
//!
//! Each public function is coerced to a function pointer of its exact
//! signature, each public field and variant is named, and each type is
//! named by its public path, so removing, renaming or changing any of them
//! breaks this file's build. Adding an item does not (extend the list when
//! you add one). The `#[non_exhaustive]` types are matched here with the
//! wildcard arm every user needs, and the engine's hidden modules (`engine`,
//! `backend`, `handoff`) are deliberately absent. The one test at the end
//! checks at run time that the library's errors stay inspectable.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tailguard::stats::BUCKET_BOUNDS_NS;
use tailguard::{
    AlignedBuffer, BackendChoice, BackendKind, BufResult, ClassOptions, ClassStats,
    ControllerChoice, ControllerCounters, DeviceInfo, DeviceStats, DirectIoAlignment, EngineHold,
    Error, ErrorKind, File, IoClass, IoFuture, LatencyHistogram, MetricsServer, OpenOptions,
    Operation, Profile, ProfileFile, QuietReads, RateLimit, Scheduler, SchedulerBuilder,
    StatsSnapshot,
};

#[allow(dead_code)]
fn scheduler_and_builder() {
    let _: fn() -> SchedulerBuilder = Scheduler::builder;
    let _: fn(SchedulerBuilder, Duration) -> SchedulerBuilder = SchedulerBuilder::latency_target;
    let _: fn(SchedulerBuilder, u32) -> SchedulerBuilder = SchedulerBuilder::ring_depth;
    let _: fn(SchedulerBuilder, BackendChoice) -> SchedulerBuilder = SchedulerBuilder::backend;
    let _: fn(SchedulerBuilder, usize) -> SchedulerBuilder = SchedulerBuilder::threads;
    let _: fn(SchedulerBuilder, &str, Profile) -> SchedulerBuilder = SchedulerBuilder::profile;
    let _: fn(SchedulerBuilder, Profile) -> SchedulerBuilder = SchedulerBuilder::default_profile;
    let _: fn(SchedulerBuilder, ControllerChoice) -> SchedulerBuilder =
        SchedulerBuilder::controller;
    let _: fn(SchedulerBuilder, Option<QuietReads>) -> SchedulerBuilder =
        SchedulerBuilder::quiet_reads;
    let _: fn(SchedulerBuilder, bool) -> SchedulerBuilder = SchedulerBuilder::waiters_run_engine;
    let _: fn(SchedulerBuilder, bool) -> SchedulerBuilder = SchedulerBuilder::eager_submit;
    let _: fn(SchedulerBuilder, u32) -> SchedulerBuilder = SchedulerBuilder::registered_files;
    let _: fn(SchedulerBuilder, PathBuf) -> io::Result<SchedulerBuilder> =
        SchedulerBuilder::profile_file;
    let _: fn(SchedulerBuilder) -> io::Result<Scheduler> = SchedulerBuilder::build;
    let _: fn(&Scheduler) -> BackendKind = Scheduler::backend;
    let _: fn(&Scheduler, &str, u32) -> io::Result<IoClass> = Scheduler::add_class;
    let _: fn(&Scheduler, &str, &ClassOptions) -> io::Result<IoClass> = Scheduler::add_class_with;
    let _: fn(u32) -> ClassOptions = ClassOptions::new;
    let _: fn(ClassOptions, RateLimit) -> ClassOptions = ClassOptions::rate_limit;
    let _: fn(&Scheduler, PathBuf) -> io::Result<File> = Scheduler::open;
    let _: fn(&Scheduler, &IoClass) -> IoFuture<io::Result<()>> = Scheduler::nop;
    let _: fn(&Scheduler, std::future::Ready<u8>) -> u8 = Scheduler::block_on;
    let _: fn(&Scheduler) -> EngineHold = Scheduler::hold_engine;
    let _: fn(&Scheduler) -> io::Result<StatsSnapshot> = Scheduler::stats;
    let _: fn(&Scheduler) = Scheduler::shutdown;
    let _: &str = tailguard::CONTROLLER_TARGET;
    let _: u32 = tailguard::DEFAULT_REGISTERED_FILES;
    let _: &Profile = &tailguard::DEFAULT_SSD_PROFILE;
    let _: &Profile = &tailguard::DEFAULT_DISK_PROFILE;
    let _: fn(&DeviceInfo) -> Profile = tailguard::scheduler::default_profile;
}

#[allow(dead_code)]
fn classes_files_and_buffers() {
    let _: fn(&IoClass) -> &str = IoClass::name;
    let _: fn(&IoClass, u32) -> io::Result<()> = IoClass::set_shares;
    let _: fn(&IoClass, Option<RateLimit>) -> io::Result<()> = IoClass::set_rate_limit;
    let _: fn(u64) -> RateLimit = RateLimit::bytes_per_s;
    let _: fn(u64) -> RateLimit = RateLimit::iops;
    let RateLimit {
        bytes_per_s: _,
        iops: _,
        burst_ns: _,
    } = RateLimit::iops(1);
    let _: fn(IoClass) -> io::Result<()> = IoClass::remove;
    let _: fn() -> OpenOptions = OpenOptions::new;
    let _: fn(OpenOptions, bool) -> OpenOptions = OpenOptions::read;
    let _: fn(OpenOptions, bool) -> OpenOptions = OpenOptions::write;
    let _: fn(OpenOptions, bool) -> OpenOptions = OpenOptions::create;
    let _: fn(OpenOptions, bool) -> OpenOptions = OpenOptions::truncate;
    let _: fn(OpenOptions, bool) -> OpenOptions = OpenOptions::direct;
    let _: fn(&OpenOptions, &Scheduler, PathBuf) -> io::Result<File> = OpenOptions::open;
    let _: fn(&File) -> &DeviceInfo = File::device;
    let _: fn(&File) -> DirectIoAlignment = File::alignment;
    let _: fn(&File, &IoClass, AlignedBuffer, u64) -> IoFuture<BufResult> = File::read_at;
    let _: fn(&File, &IoClass, AlignedBuffer, u64) -> IoFuture<BufResult> = File::write_at;
    let _: fn(&File, &IoClass) -> IoFuture<io::Result<()>> = File::fdatasync;
    let _: fn(&File, &IoClass) -> IoFuture<io::Result<()>> = File::fsync;
    let _: fn(IoFuture<BufResult>) -> BufResult = IoFuture::wait;
    let _: fn(BufResult) -> (io::Result<usize>, AlignedBuffer) = |result| result;
    let _: fn(usize, usize) -> Result<AlignedBuffer, Error> = AlignedBuffer::new;
    let _: fn(&[u8], usize) -> Result<AlignedBuffer, Error> = AlignedBuffer::from_slice;
    let _: fn(&AlignedBuffer) -> usize = AlignedBuffer::len;
    let _: fn(&AlignedBuffer) -> bool = AlignedBuffer::is_empty;
    let _: fn(&AlignedBuffer) -> usize = AlignedBuffer::alignment;
    let _: fn(&AlignedBuffer) -> *const u8 = AlignedBuffer::as_ptr;
    let _: fn(&mut AlignedBuffer) -> *mut u8 = AlignedBuffer::as_mut_ptr;
    let _: fn(&mut AlignedBuffer, usize) = AlignedBuffer::truncate;
    let _: fn(usize, u64, u64, DirectIoAlignment) -> Result<(), Error> =
        tailguard::buffer::check_alignment;
    fn is_future<T: Future<Output = BufResult> + Send>() {}
    is_future::<IoFuture<BufResult>>();
}

#[allow(dead_code)]
fn errors(error: &Error) {
    let _: fn(ErrorKind) -> Error = Error::new;
    let _: fn(Error, PathBuf) -> Error = Error::with_path;
    let _: fn(&Error) -> &ErrorKind = Error::kind;
    let _: fn(&Error) -> Option<&Path> = Error::path;
    let _: fn(&Error) -> Option<i32> = Error::raw_os_error;
    let _: fn(&Error) -> bool = Error::is_misaligned;
    let _: fn(&Error) -> io::ErrorKind = Error::io_error_kind;
    let _: fn(Error) -> io::Error = io::Error::from;
    let _: fn(&io::Error) -> Option<i32> = tailguard::os_error_code;
    let _: fn(Operation) -> &'static str = Operation::as_str;
    match Operation::Read {
        Operation::Read
        | Operation::Write
        | Operation::Fsync
        | Operation::Fdatasync
        | Operation::Nop => {}
        _ => {}
    }
    match error.kind() {
        ErrorKind::Request {
            errno: _,
            operation: _,
            offset: _,
            length_bytes: _,
        } => {}
        ErrorKind::MisalignedOffset {
            offset: _,
            required_bytes: _,
        } => {}
        ErrorKind::MisalignedLength {
            length_bytes: _,
            required_bytes: _,
        } => {}
        ErrorKind::MisalignedPointer {
            pointer: _,
            required_bytes: _,
        } => {}
        ErrorKind::OffsetOutOfRange {
            offset: _,
            length_bytes: _,
        } => {}
        ErrorKind::AlignmentNotPowerOfTwo { alignment_bytes: _ } => {}
        ErrorKind::BufferTooLarge {
            length_bytes: _,
            alignment_bytes: _,
        } => {}
        ErrorKind::OutOfMemory {
            length_bytes: _,
            alignment_bytes: _,
        } => {}
        ErrorKind::ProfileFile { message: _ } => {}
        ErrorKind::InvalidConfig { message: _ } => {}
        _ => {}
    }
}

#[allow(dead_code)]
fn devices(info: &DeviceInfo, alignment: DirectIoAlignment) {
    let _: fn(&std::fs::File) -> io::Result<DeviceInfo> = tailguard::device::device_of;
    let _: fn(&Path) -> io::Result<DeviceInfo> = tailguard::device::device_of_path;
    let _: fn(&std::fs::File, &DeviceInfo) -> DirectIoAlignment =
        tailguard::device::direct_io_alignment;
    let _: fn(&DeviceInfo) -> &DeviceInfo = DeviceInfo::innermost;
    let DeviceInfo {
        id: _,
        name: _,
        block_device: _,
        rotational: _,
        logical_block_size: _,
        max_request_bytes: _,
        nr_requests: _,
        write_cache: _,
        backing: _,
        ..
    } = info;
    let DirectIoAlignment {
        memory_bytes: _,
        offset_bytes: _,
        ..
    } = alignment;
    for choice in [
        BackendChoice::Auto,
        BackendChoice::IoUring,
        BackendChoice::Threads,
    ] {
        let _ = choice;
    }
    match BackendKind::Threads {
        BackendKind::IoUring | BackendKind::Threads => {}
        _ => {}
    }
    match ControllerChoice::Fixed {
        ControllerChoice::Fixed | ControllerChoice::Adaptive => {}
    }
}

#[allow(dead_code)]
fn stats_and_metrics(snapshot: &StatsSnapshot) {
    let _: fn(BackendKind) -> StatsSnapshot = StatsSnapshot::new;
    let _: for<'a> fn(&'a StatsSnapshot, &str) -> Option<&'a ClassStats> = StatsSnapshot::class;
    let _: for<'a> fn(&'a StatsSnapshot, &str) -> Option<&'a DeviceStats> = StatsSnapshot::device;
    let StatsSnapshot {
        backend: _,
        devices,
        classes,
        ..
    } = snapshot;
    let _: fn(String, u32) -> ClassStats = ClassStats::new;
    for class in classes {
        let ClassStats {
            name: _,
            shares: _,
            ops: _,
            bytes: _,
            errors: _,
            queue_wait_ns: _,
            device_time_ns: _,
            latency_ns: _,
            rate_limit_bytes_per_s: _,
            rate_limit_iops: _,
            ..
        } = class;
    }
    for device in devices {
        let DeviceStats {
            name: _,
            ops: _,
            bytes: _,
            in_flight_pieces: _,
            in_flight_ns: _,
            budget_ns: _,
            queued_pieces: _,
            budget_changes: _,
            controller,
            profile: _,
            ..
        } = device;
        let ControllerCounters {
            windows: _,
            grows: _,
            shrinks: _,
            holds: _,
            congested: _,
            additive_grows: _,
            starved_reads: _,
            starving: _,
            ..
        } = controller;
    }
    let _: fn() -> LatencyHistogram = LatencyHistogram::new;
    let _: fn(&mut LatencyHistogram, u64) = LatencyHistogram::record;
    let _: fn(&LatencyHistogram) -> u64 = LatencyHistogram::len;
    let _: fn(&LatencyHistogram) -> bool = LatencyHistogram::is_empty;
    let _: fn(&LatencyHistogram) -> u64 = LatencyHistogram::sum_ns;
    let _: fn(&LatencyHistogram, f64) -> u64 = LatencyHistogram::value_at_quantile;
    let _: fn(&LatencyHistogram) -> u64 = LatencyHistogram::min;
    let _: fn(&LatencyHistogram) -> u64 = LatencyHistogram::max;
    let _: fn(&LatencyHistogram) -> f64 = LatencyHistogram::mean;
    let _: fn(&mut LatencyHistogram, &LatencyHistogram) = LatencyHistogram::add;
    let _: fn(&LatencyHistogram) -> bool = LatencyHistogram::is_exact;
    let _: fn(&LatencyHistogram) -> usize = LatencyHistogram::heap_bytes;
    let _: Vec<(u64, u64)> = LatencyHistogram::new().buckets().collect();
    let _: [u64; 22] = BUCKET_BOUNDS_NS;
    let _: fn(&StatsSnapshot) -> String = tailguard::render_openmetrics;
    type Source = fn() -> io::Result<String>;
    let _: fn(std::net::SocketAddr, Source) -> io::Result<MetricsServer> = MetricsServer::start;
    let _: fn(&MetricsServer) -> std::net::SocketAddr = MetricsServer::local_address;
    let _: &str = tailguard::metrics::OPENMETRICS_CONTENT_TYPE;
    fn serialisable<T: serde::Serialize>() {}
    serialisable::<StatsSnapshot>();
    serialisable::<LatencyHistogram>();
}

#[allow(dead_code)]
fn quiet_reads(rule: QuietReads) -> QuietReads {
    let QuietReads {
        quiet_ns,
        limit_factor,
    } = rule;
    let _: (u64, u64) = (quiet_ns, limit_factor);
    QuietReads::default()
}

#[allow(dead_code)]
fn profile_files() {
    let _: fn(PathBuf) -> Result<ProfileFile, Error> = ProfileFile::load;
    let _: fn(&str) -> Result<ProfileFile, Error> = ProfileFile::from_toml_str;
    let _: fn(&str) -> Result<ProfileFile, Error> = ProfileFile::from_seastar_yaml_str;
    let _: fn(&ProfileFile) -> Result<String, Error> = ProfileFile::to_toml_string;
    let _: fn(&ProfileFile) -> Result<tailguard::profile_file::ResolvedProfiles, Error> =
        ProfileFile::resolve;
    let _: u32 = tailguard::profile_file::PROFILE_FILE_VERSION;
    let _: fn() -> tailguard::profile_file::Knee = Default::default;
    let _: fn() -> tailguard::profile_file::Knees = Default::default;
    let _: fn() -> tailguard::profile_file::Metadata = Default::default;
    let _: fn(tailguard::profile_file::Rates) -> tailguard::profile_file::DeviceEntry =
        tailguard::profile_file::DeviceEntry::from_rates;
    let _: fn() -> ProfileFile = ProfileFile::new;
}

#[test]
fn a_profile_file_error_stays_inspectable_inside_an_io_error() {
    let error = ProfileFile::from_toml_str("version = 99").unwrap_err();
    let io_error = io::Error::from(error.clone());
    assert_eq!(io_error.kind(), io::ErrorKind::InvalidData);
    let inner = io_error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<Error>())
        .expect("the io::Error carries the library's Error");
    assert_eq!(inner, &error);
}

#[test]
fn a_misaligned_request_says_which_part_and_what_alignment() {
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::Threads)
        .build()
        .unwrap();
    let class = scheduler.add_class("c", 1).unwrap();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("public-api-alignment");
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&scheduler, &path)
    {
        Ok(file) => file,
        Err(error) => {
            println!("skipping: no O_DIRECT here ({error})");
            return;
        }
    };
    let required = file.alignment().offset_bytes;
    if required <= 1 {
        println!("skipping: this device needs no alignment");
        return;
    }
    let buffer = AlignedBuffer::new(4096, 4096).unwrap();
    let (result, _) = file.read_at(&class, buffer, 1).wait();
    let error = result.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    let misaligned = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<Error>())
        .expect("the io::Error carries the library's Error");
    assert_eq!(misaligned.path(), Some(path.as_path()));
    assert!(misaligned.is_misaligned());
    assert_eq!(
        misaligned.kind(),
        &ErrorKind::MisalignedOffset {
            offset: 1,
            required_bytes: required
        }
    );
    let text = misaligned.to_string();
    assert!(text.contains("offset 1 is not a multiple of"), "{text}");
    assert!(
        error.to_string().contains("public-api-alignment"),
        "{error}"
    );
    drop(file);
    let _ = std::fs::remove_file(path);
}
