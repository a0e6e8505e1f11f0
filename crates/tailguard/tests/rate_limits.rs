//! Per-class rate limits end to end, on both backends: a capped class with a
//! deep queue moves at its cap, in requests/s and in bytes/s, on a scratch file.
//!
//! The requests read a sparse scratch file with O_DIRECT (the filesystem
//! answers holes without touching the disk), at a few hundred requests per
//! second, so the cap, not the disk (shared with other work on a test
//! machine), sets the pace. The rate is measured
//! between the completion of the request that follows the initial burst and the
//! completion of the last, so the burst a full bucket allows at the start does
//! not count. Faster than the cap would be a bug whatever the machine's load
//! (the token buckets forbid it); slower than the cap by more than 5% would
//! need the engine to wake later than the burst (20 ms) again and again, which
//! an idle 2-core machine does not do.
//!
//! A lifted cap releases queued work at once, and a cap that is changed while
//! work is queued applies to it.

mod common;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tailguard::{AlignedBuffer, BackendChoice, ClassOptions, IoClass, RateLimit, Scheduler};

/// Requests each measurement waits for: about 1.2 s at the caps below.
const REQUESTS: usize = 600;
/// The largest request, for the scratch file's size.
const BLOCK_MAX: usize = 65_536;
/// The burst the tests give their caps.
const BURST: Duration = Duration::from_millis(20);

/// A scheduler on each backend this machine has (io_uring skipped, with the
/// reason printed, where it is refused).
fn schedulers() -> Vec<(BackendChoice, Scheduler)> {
    common::schedulers([BackendChoice::IoUring, BackendChoice::Threads])
}

fn open(scheduler: &Scheduler, name: &str) -> (tailguard::File, PathBuf) {
    let path = common::scratch("rate-limit-tests", name);
    let file = common::open_read_write(scheduler, &path);
    file.std_file()
        .set_len((REQUESTS * BLOCK_MAX) as u64)
        .unwrap();
    (file, path)
}

/// Submits `requests` reads of `block` bytes at once, waits for them in
/// order, and returns the rate in requests per second measured from the
/// completion of request `skip` to the last.
fn rate_after_burst(
    file: &tailguard::File,
    class: &IoClass,
    block: usize,
    requests: usize,
    skip: usize,
) -> f64 {
    let alignment = (file.alignment().memory_bytes as usize).max(4096);
    let futures: Vec<_> = (0..requests)
        .map(|index| {
            let buffer = AlignedBuffer::new(block, alignment).unwrap();
            file.read_at(class, buffer, (index * block) as u64)
        })
        .collect();
    let mut started = None;
    for (index, future) in futures.into_iter().enumerate() {
        let (result, _) = future.wait();
        assert_eq!(result.unwrap(), block);
        if index == skip {
            started = Some(Instant::now());
        }
    }
    let elapsed = started.unwrap().elapsed().as_secs_f64();
    (requests - 1 - skip) as f64 / elapsed
}

fn assert_within_5_percent(measured: f64, cap: f64, what: &str) {
    let ratio = measured / cap;
    assert!(
        (0.95..=1.05).contains(&ratio),
        "{what}: {measured:.1} against a cap of {cap:.1} ({ratio:.3})"
    );
}

/// Requests a full bucket lets go at once: the burst, and one into debt.
fn burst_requests(per_second: f64) -> usize {
    (per_second * BURST.as_secs_f64()).ceil() as usize + 1
}

#[test]
fn an_iops_cap_holds_a_deep_queue_of_reads_at_the_cap() {
    const IOPS: u64 = 500;
    for (choice, scheduler) in schedulers() {
        let limit = RateLimit::iops(IOPS).with_burst_ns(BURST.as_nanos() as u64);
        let class = scheduler
            .add_class_with("capped", &ClassOptions::new(100).rate_limit(limit))
            .unwrap();
        let (file, path) = open(&scheduler, &format!("iops-{choice:?}"));
        let skip = burst_requests(IOPS as f64);
        let rate = rate_after_burst(&file, &class, 4096, REQUESTS, skip);
        println!("{choice:?}: {rate:.1} reads/s under a cap of {IOPS}");
        assert_within_5_percent(rate, IOPS as f64, &format!("{choice:?} reads/s"));
        let stats = scheduler.stats().unwrap();
        assert_eq!(stats.classes[0].rate_limit_iops, Some(IOPS));
        drop(file);
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn a_byte_cap_holds_a_deep_queue_of_reads_at_the_cap() {
    const BYTES_PER_S: u64 = 16 << 20;
    const BLOCK: usize = BLOCK_MAX;
    for (choice, scheduler) in schedulers() {
        let class = scheduler.add_class("capped", 100).unwrap();
        class
            .set_rate_limit(Some(
                RateLimit::bytes_per_s(BYTES_PER_S).with_burst_ns(BURST.as_nanos() as u64),
            ))
            .unwrap();
        let (file, path) = open(&scheduler, &format!("bytes-{choice:?}"));
        let per_second = BYTES_PER_S as f64 / BLOCK as f64;
        let skip = burst_requests(per_second);
        let rate = rate_after_burst(&file, &class, BLOCK, REQUESTS / 2, skip);
        let bytes_per_s = rate * BLOCK as f64;
        println!("{choice:?}: {bytes_per_s:.0} bytes/s under a cap of {BYTES_PER_S}");
        assert_within_5_percent(
            bytes_per_s,
            BYTES_PER_S as f64,
            &format!("{choice:?} bytes/s"),
        );
        drop(file);
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn lifting_a_cap_releases_queued_work_and_bad_caps_are_refused() {
    for (choice, scheduler) in schedulers() {
        // One request per ten seconds: everything after the first two waits.
        let class = scheduler
            .add_class_with(
                "slow",
                &ClassOptions::new(100).rate_limit(RateLimit::iops(1).with_burst_ns(1)),
            )
            .unwrap();
        let (file, path) = open(&scheduler, &format!("lift-{choice:?}"));
        let futures: Vec<_> = (0..20)
            .map(|index| {
                let buffer = AlignedBuffer::new(4096, 4096).unwrap();
                file.read_at(&class, buffer, index * 4096)
            })
            .collect();
        // Far less than the cap's 18 s: only the lifted cap lets them finish.
        std::thread::sleep(Duration::from_millis(50));
        let queued: u64 = scheduler.stats().unwrap().classes[0].ops;
        assert!(queued <= 2, "{choice:?}: {queued} done under a cap of 1/s");
        class.set_rate_limit(None).unwrap();
        for future in futures {
            assert_eq!(future.wait().0.unwrap(), 4096);
        }
        let error = class
            .set_rate_limit(Some(RateLimit::bytes_per_s(0)))
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("bytes_per_s"), "{error}");
        drop(file);
        let _ = std::fs::remove_file(path);
    }
}
