//! Misuse of the API as a hostile new user would try it: an `IoClass` of one
//! `Scheduler` used on another's file, and a clone of a removed class. Each
//! is a clear error at once, never a panic, and the scheduler keeps serving
//! everyone else.
//!
//! Files live in cargo's per-test temporary directory (O_DIRECT); the
//! thread-pool backend runs everywhere.

mod common;
use std::path::PathBuf;
use tailguard::{AlignedBuffer, BackendChoice, Scheduler};

const BLOCK: usize = 4096;

fn scratch(name: &str) -> PathBuf {
    let path = common::scratch("misuse-tests", name);
    std::fs::write(&path, vec![7u8; 4 * BLOCK]).unwrap();
    path
}

fn scheduler() -> Scheduler {
    Scheduler::builder()
        .backend(BackendChoice::Threads)
        .build()
        .unwrap()
}

fn buffer() -> AlignedBuffer {
    AlignedBuffer::new(BLOCK, BLOCK).unwrap()
}

#[test]
fn a_class_of_another_scheduler_is_refused_and_both_live_on() {
    let path = scratch("foreign-class");
    let mine = scheduler();
    let theirs = scheduler();
    let own = mine.add_class("own", 100).unwrap();
    // More classes on the other scheduler than this one has: their numbers
    // are out of this engine's range.
    let foreign: Vec<_> = (0..5)
        .map(|index| theirs.add_class(&format!("theirs{index}"), 100).unwrap())
        .collect();
    let file = mine.open(&path).unwrap();
    for class in [&foreign[4], &foreign[0]] {
        let (result, returned) = file.read_at(class, buffer(), 0).wait();
        let error = result.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
        assert!(error.to_string().contains("another Scheduler"), "{error}");
        assert_eq!(returned.len(), BLOCK, "the buffer comes back");
        let error = file.fdatasync(class).wait().unwrap_err();
        assert!(error.to_string().contains("another Scheduler"), "{error}");
        let error = mine.nop(class).wait().unwrap_err();
        assert!(error.to_string().contains("another Scheduler"), "{error}");
    }
    // Both schedulers still serve their own classes.
    let (result, data) = file.read_at(&own, buffer(), 0).wait();
    assert_eq!(result.unwrap(), BLOCK);
    assert!(data.iter().all(|&byte| byte == 7));
    theirs.nop(&foreign[4]).wait().unwrap();
    let stats = mine.stats().unwrap();
    assert_eq!(stats.class("own").unwrap().ops, 1);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_removed_class_is_refused_through_its_clones() {
    let path = scratch("removed-class");
    let scheduler = scheduler();
    let keeper = scheduler.add_class("keeper", 100).unwrap();
    let doomed = scheduler.add_class("doomed", 100).unwrap();
    let clone = doomed.clone();
    let file = scheduler.open(&path).unwrap();
    let (result, _) = file.read_at(&clone, buffer(), 0).wait();
    assert_eq!(result.unwrap(), BLOCK, "live until removed");
    doomed.remove().unwrap();
    let (result, _) = file.read_at(&clone, buffer(), 0).wait();
    let error = result.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    assert!(error.to_string().contains("removed"), "{error}");
    assert!(
        error.to_string().contains("doomed"),
        "names the class: {error}"
    );
    assert!(file.fdatasync(&clone).wait().is_err());
    assert!(scheduler.nop(&clone).wait().is_err());
    assert!(clone.set_shares(5).is_err(), "shares of a removed class");
    assert!(clone.clone().remove().is_err(), "removed twice");
    // The name is free again, and the scheduler serves everyone else.
    let reborn = scheduler.add_class("doomed", 10).unwrap();
    let (result, _) = file.write_at(&reborn, buffer(), 0).wait();
    assert_eq!(result.unwrap(), BLOCK);
    let (result, _) = file.read_at(&keeper, buffer(), 0).wait();
    assert_eq!(result.unwrap(), BLOCK);
    let stats = scheduler.stats().unwrap();
    assert_eq!(
        stats.classes.iter().map(|class| class.ops).sum::<u64>(),
        3,
        "refused requests never reached a dispatcher"
    );
    std::fs::remove_file(&path).unwrap();
}

/// A request whose end would pass the largest file offset is refused before
/// it reaches the engine: split into pieces, its end would wrap and a later
/// piece would write at the file's start.
#[test]
fn a_request_ending_past_the_largest_offset_is_refused_and_writes_nothing() {
    let path = scratch("offset-range");
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::Threads)
        .default_profile(tailguard::Profile {
            max_request_bytes: BLOCK as u64,
            ..tailguard::DEFAULT_SSD_PROFILE.clone()
        })
        .build()
        .unwrap();
    let class = scheduler.add_class("writes", 100).unwrap();
    let file = scheduler.open(&path).unwrap();
    let mut zeros = AlignedBuffer::new(2 * BLOCK, BLOCK).unwrap();
    for offset in [
        u64::MAX - BLOCK as u64 + 1,
        i64::MAX as u64 - BLOCK as u64 + 1,
    ] {
        let (result, returned) = file.write_at(&class, zeros, offset).wait();
        let error = result.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
        let detail = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<tailguard::Error>())
            .expect("a tailguard::Error");
        assert!(
            matches!(
                detail.kind(),
                tailguard::ErrorKind::OffsetOutOfRange { length_bytes, .. }
                    if *length_bytes == 2 * BLOCK as u64
            ),
            "{detail:?}"
        );
        assert!(error.to_string().contains("largest file offset"), "{error}");
        zeros = returned;
    }
    // The unaligned forms too, before their block arithmetic could wrap.
    for offset in [u64::MAX - 10, i64::MAX as u64 - 10] {
        let mut out = [0u8; 20];
        let read = scheduler.block_on(file.read_at_unaligned(&class, &mut out, offset));
        let write = scheduler.block_on(file.write_at_unaligned(&class, &[1; 20], offset));
        for error in [read.unwrap_err(), write.unwrap_err()] {
            assert!(error.to_string().contains("largest file offset"), "{error}");
        }
    }
    let (result, data) = file.read_at(&class, buffer(), 0).wait();
    assert_eq!(result.unwrap(), BLOCK);
    assert!(
        data.iter().all(|&byte| byte == 7),
        "the file's start is intact"
    );
}

/// A default profile out of range is refused by `build`, as a device's is,
/// naming the key: it used to reach the engine, where a huge piece size or
/// latency target overflowed.
#[test]
fn a_default_profile_out_of_range_is_refused_at_build() {
    let good = tailguard::DEFAULT_SSD_PROFILE.clone();
    let cases = [
        (
            tailguard::Profile {
                max_request_bytes: 4 << 30,
                ..good.clone()
            },
            "max_request_bytes",
        ),
        (
            tailguard::Profile {
                latency_target_us: u64::MAX,
                ..good.clone()
            },
            "latency_target_us",
        ),
    ];
    for (profile, key) in cases {
        let error = Scheduler::builder()
            .backend(BackendChoice::Threads)
            .default_profile(profile)
            .build()
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
        let text = error.to_string();
        assert!(
            text.contains("default profile") && text.contains(key),
            "{text}"
        );
    }
    // A latency target far out of range through the builder is held to it.
    let scheduler = Scheduler::builder()
        .backend(BackendChoice::Threads)
        .latency_target(std::time::Duration::MAX)
        .build()
        .unwrap();
    let class = scheduler.add_class("c", 1).unwrap();
    let path = scratch("huge-target");
    let file = scheduler.open(&path).unwrap();
    let (result, _) = file.write_at(&class, buffer(), 0).wait();
    assert_eq!(result.unwrap(), buffer().len());
    drop(file);
    std::fs::remove_file(&path).unwrap();
}
