//! The engine under injected faults, on both backends, without privileges:
//! the fault-injecting backend (`tailguard::backend::fault`) wraps io_uring or
//! the thread pool and fails, shortens, stalls or loses requests on purpose.
//!
//! The invariants checked: every request completes exactly once, with its
//! result or an error that a rule explains (a request touching an error range
//! always fails); data acknowledged as written reads back, and data whose
//! write failed before reaching the device is unchanged; the backend
//! completes every op it was given; nothing hangs (each case runs under a
//! watchdog); and shutdown during a stall waits for the stalled requests and
//! completes them. A property test draws random fault plans and workloads
//! from a fixed seed; `PROPTEST_CASES=N` runs more of them and
//! `PROPTEST_RNG_SEED=N` others (`-- --nocapture` prints the running tally).
//!
//! Files live in cargo's per-test temporary directory, on a disk that takes
//! O_DIRECT; io_uring cases skip with a printed reason where it is refused.

mod common;
use common::{pattern, BlockFile, BLOCK};
use proptest::prelude::*;
use std::io;
use std::time::Duration;
use tailguard::backend::fault::{FaultInjector, FaultPlan, FaultRule, OpFilter};
use tailguard::{AlignedBuffer, BackendChoice, OpenOptions, Scheduler};

/// Blocks in each test file: reads go to the first half, writes to the second.
const BLOCKS: u64 = 64;
/// The most time one case may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(60);

/// A scheduler on `choice` with `injector`, or `None` (reason printed) where
/// io_uring is refused.
fn scheduler(
    choice: BackendChoice,
    injector: &FaultInjector,
    ring_depth: u32,
) -> Option<Scheduler> {
    let builder = Scheduler::builder()
        .ring_depth(ring_depth)
        .threads(2)
        .fault_injection(injector.clone());
    common::build_on(choice, builder)
}

/// Runs `case` on its own thread, under the [`WATCHDOG`], on `choice` with a
/// ring of `ring_depth` whose backend injects `plan`'s faults, and a fresh
/// [`BlockFile`] named `name`; skips (printed) where io_uring is refused.
fn with_faults(
    choice: BackendChoice,
    plan: FaultPlan,
    ring_depth: u32,
    name: String,
    case: impl FnOnce(&FaultInjector, &Scheduler, &BlockFile) + Send + 'static,
) {
    common::watched(WATCHDOG, move || {
        let injector = FaultInjector::new(plan);
        let Some(scheduler) = scheduler(choice, &injector, ring_depth) else {
            return;
        };
        let file = BlockFile::create("fault-tests", &name, BLOCKS);
        case(&injector, &scheduler, &file);
    });
}

/// [`with_faults`] on each of [`BACKENDS`], with a ring of 256 and a file named
/// `name` and the backend; `case` is also told the backend.
fn on_each_backend(
    name: &str,
    plan: FaultPlan,
    case: impl Fn(BackendChoice, &FaultInjector, &Scheduler, &BlockFile) + Clone + Send + 'static,
) {
    for choice in BACKENDS {
        let case = case.clone();
        let file_name = format!("{name}-{choice:?}");
        with_faults(
            choice,
            plan.clone(),
            256,
            file_name,
            move |injector, scheduler, file| case(choice, injector, scheduler, file),
        );
    }
}

const BACKENDS: [BackendChoice; 2] = [BackendChoice::IoUring, BackendChoice::Threads];

/// One request of a workload.
#[derive(Clone, Copy, Debug)]
enum Request {
    /// Reads a block of the first half (never written by the workload).
    Read(u64),
    /// Writes generation 1 to a block of the second half (each at most once).
    Write(u64),
    Fdatasync,
}

/// What a request came back with: its byte count or its errno.
type Outcome = Result<usize, i32>;

fn errno_of(error: &io::Error) -> i32 {
    tailguard::os_error_code(error)
        .unwrap_or_else(|| panic!("an injected fault is an OS error: {error}"))
}

/// Submits every request of `workload` at once, then waits for each; returns
/// each one's outcome, checking read data on the way.
fn run_workload(scheduler: &Scheduler, file: &BlockFile, workload: &[Request]) -> Vec<Outcome> {
    let handle = OpenOptions::new()
        .read(true)
        .write(true)
        .open(scheduler, &file.path)
        .unwrap();
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let name = format!(
        "work{}",
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let class = scheduler.add_class(&name, 100).unwrap();
    enum Pending {
        Data(u64, bool, tailguard::IoFuture<tailguard::BufResult>),
        Sync(tailguard::IoFuture<io::Result<()>>),
    }
    let pending: Vec<Pending> = workload
        .iter()
        .map(|request| match *request {
            Request::Read(block) => {
                let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
                let offset = block * BLOCK as u64;
                Pending::Data(block, true, handle.read_at(&class, buffer, offset))
            }
            Request::Write(block) => {
                let offset = block * BLOCK as u64;
                Pending::Data(
                    block,
                    false,
                    handle.write_at(&class, pattern(block, 1), offset),
                )
            }
            Request::Fdatasync => Pending::Sync(handle.fdatasync(&class)),
        })
        .collect();
    let outcomes: Vec<Outcome> = pending
        .into_iter()
        .map(|pending| match pending {
            Pending::Data(block, is_read, future) => {
                let (result, buffer) = future.wait();
                let outcome = result.as_ref().map(|&bytes| bytes).map_err(errno_of);
                if let (true, Ok(bytes)) = (is_read, outcome) {
                    assert!(bytes <= BLOCK);
                    assert_eq!(
                        &buffer[..bytes],
                        &pattern(block, 0)[..bytes],
                        "block {block}: a successful read returns the data"
                    );
                }
                outcome
            }
            Pending::Sync(future) => future.wait().map(|()| 0).map_err(|e| errno_of(&e)),
        })
        .collect();
    let stats = scheduler.stats().unwrap();
    let class_stats = stats.class(&name).unwrap();
    assert_eq!(
        class_stats.ops,
        workload.len() as u64,
        "each request counted once"
    );
    assert_eq!(
        class_stats.errors,
        outcomes.iter().filter(|outcome| outcome.is_err()).count() as u64
    );
    outcomes
}

/// The errnos `rules` can produce for `request`, and whether one of them
/// must (an error range it touches).
fn explained(rules: &[FaultRule], request: Request) -> (Vec<i32>, bool) {
    let (kind_matches, range): (fn(OpFilter) -> bool, std::ops::Range<u64>) = match request {
        Request::Read(block) => (
            |ops| matches!(ops, OpFilter::Any | OpFilter::Reads),
            block * BLOCK as u64..(block + 1) * BLOCK as u64,
        ),
        Request::Write(block) => (
            |ops| matches!(ops, OpFilter::Any | OpFilter::Writes),
            block * BLOCK as u64..(block + 1) * BLOCK as u64,
        ),
        Request::Fdatasync => (|ops| matches!(ops, OpFilter::Any | OpFilter::Syncs), 0..0),
    };
    let mut errnos = Vec::new();
    let mut must = false;
    for rule in rules {
        match rule {
            FaultRule::ErrorRange {
                offsets,
                ops,
                errno,
            } if kind_matches(*ops) => {
                let touches = if range.is_empty() {
                    offsets.contains(&0)
                } else {
                    range.start < offsets.end && offsets.start < range.end
                };
                if touches {
                    errnos.push(*errno);
                    must = true;
                }
            }
            FaultRule::ErrorRate { ops, errno, .. } if kind_matches(*ops) => errnos.push(*errno),
            FaultRule::Disappear { errno, .. } => errnos.push(*errno),
            _ => {}
        }
    }
    (errnos, must)
}

/// Totals over every case this process ran, printed after each (visible with
/// `--nocapture`; the last line is the run's tally, quoted in the README).
static TALLY: std::sync::Mutex<[u64; 7]> = std::sync::Mutex::new([0; 7]);

fn tally(requests: u64, failed: u64, counts: &tailguard::backend::fault::FaultCounts) {
    let mut tally = TALLY.lock().unwrap();
    let added = [
        1,
        requests,
        failed,
        counts.errors_injected,
        counts.short_transfers,
        counts.ops_stalled,
        counts.ops_failed_gone,
    ];
    for (total, value) in tally.iter_mut().zip(added) {
        *total += value;
    }
    println!(
        "fault tally: {} engine runs, {} requests, each completed once ({} with an error); \
         injected: {} errors, {} short transfers, {} stalled ops, {} ops on a vanished device; lost: 0",
        tally[0], tally[1], tally[2], tally[3], tally[4], tally[5], tally[6]
    );
}

/// Runs one fault plan and workload on `choice` and checks every invariant.
fn check_case(choice: BackendChoice, plan: FaultPlan, workload: Vec<Request>, ring_depth: u32) {
    let name = format!("case-{choice:?}-{}", plan.seed);
    with_faults(
        choice,
        plan.clone(),
        ring_depth,
        name,
        move |injector, scheduler, file| {
            let outcomes = run_workload(scheduler, file, &workload);
            scheduler.shutdown();
            let counts = injector.counts();
            assert_eq!(counts.ops_pushed, counts.ops_completed, "{counts:?}");
            assert_eq!(counts.ops_held_now, 0);
            let failed = outcomes.iter().filter(|outcome| outcome.is_err()).count();
            tally(workload.len() as u64, failed as u64, &counts);
            let short_possible = plan
                .rules
                .iter()
                .any(|rule| matches!(rule, FaultRule::ShortRate { .. }));
            let gone_possible = plan
                .rules
                .iter()
                .any(|rule| matches!(rule, FaultRule::Disappear { .. }));
            for (request, outcome) in workload.iter().zip(&outcomes) {
                let (errnos, must_fail) = explained(&plan.rules, *request);
                match *outcome {
                    Err(errno) => assert!(
                        errnos.contains(&errno),
                        "{request:?} failed with errno {errno}, which no rule of {plan:?} gives"
                    ),
                    Ok(bytes) => {
                        assert!(
                            !must_fail,
                            "{request:?} touches an error range but succeeded"
                        );
                        let full = if matches!(request, Request::Fdatasync) {
                            0
                        } else {
                            BLOCK
                        };
                        assert!(
                            bytes == full || (short_possible && bytes < full),
                            "{request:?}: {bytes} bytes"
                        );
                    }
                }
                if let Request::Write(block) = *request {
                    let on_disk = file.block(block);
                    match *outcome {
                        Ok(bytes) => assert_eq!(
                            &on_disk[..bytes],
                            &pattern(block, 1)[..bytes],
                            "block {block}: an acknowledged write reads back"
                        ),
                        Err(_) if !gone_possible => assert_eq!(
                            on_disk,
                            pattern(block, 0).to_vec(),
                            "block {block}: a write failed before the device left it unchanged"
                        ),
                        Err(_) => {}
                    }
                }
            }
        },
    );
}

fn op_filter() -> impl Strategy<Value = OpFilter> {
    prop_oneof![
        Just(OpFilter::Any),
        Just(OpFilter::Reads),
        Just(OpFilter::Writes),
        Just(OpFilter::Syncs),
    ]
}

fn errno() -> impl Strategy<Value = i32> {
    prop_oneof![Just(libc::EIO), Just(libc::ENODEV)]
}

fn rule() -> impl Strategy<Value = FaultRule> {
    let block = BLOCK as u64;
    prop_oneof![
        (0..BLOCKS, 1..8u64, op_filter(), errno()).prop_map(move |(start, length, ops, errno)| {
            FaultRule::ErrorRange {
                offsets: start * block..(start + length) * block,
                ops,
                errno,
            }
        }),
        (0..300_000u32, op_filter(), errno()).prop_map(|(per_million, ops, errno)| {
            FaultRule::ErrorRate {
                per_million,
                ops,
                errno,
            }
        }),
        (0..500_000u32).prop_map(|per_million| FaultRule::ShortRate { per_million }),
        (1..16u64, 1..30u64).prop_map(|(at_op, ms)| FaultRule::Stall {
            at_op,
            duration: Duration::from_millis(ms),
        }),
        (1..60u64, errno()).prop_map(|(at_op, errno)| FaultRule::Disappear { at_op, errno }),
    ]
}

fn plan() -> impl Strategy<Value = FaultPlan> {
    (any::<u64>(), prop::collection::vec(rule(), 0..4))
        .prop_map(|(seed, rules)| FaultPlan { seed, rules })
}

/// Up to 32 requests; writes go to distinct blocks of the second half.
fn workload() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec((0..3u8, 0..BLOCKS / 2), 1..32).prop_map(|choices| {
        choices
            .into_iter()
            .enumerate()
            .map(|(index, (kind, block))| match kind {
                0 => Request::Read(block),
                1 => Request::Write(BLOCKS / 2 + index as u64),
                _ => Request::Fdatasync,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        max_shrink_iters: 64,
        // The same plans on every run (CI included); PROPTEST_RNG_SEED=N
        // and PROPTEST_CASES=N draw others, and more.
        rng_seed: proptest::test_runner::RngSeed::Fixed(15),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_fault_plans_lose_no_request_on_either_backend(
        plan in plan(),
        workload in workload(),
        ring_depth in prop_oneof![Just(4u32), Just(256u32)],
    ) {
        for choice in BACKENDS {
            check_case(choice, plan.clone(), workload.clone(), ring_depth);
        }
    }
}

#[test]
fn an_error_range_fails_exactly_the_requests_that_touch_it() {
    let plan = FaultPlan {
        seed: 1,
        rules: vec![FaultRule::ErrorRange {
            offsets: 4 * BLOCK as u64..6 * BLOCK as u64,
            ops: OpFilter::Reads,
            errno: libc::EIO,
        }],
    };
    let workload: Vec<Request> = (0..10).map(Request::Read).collect();
    on_each_backend("range", plan, move |choice, injector, scheduler, file| {
        let outcomes = run_workload(scheduler, file, &workload);
        let failed: Vec<usize> = (0..outcomes.len())
            .filter(|&index| outcomes[index].is_err())
            .collect();
        assert_eq!(failed, [4, 5], "{choice:?}: {outcomes:?}");
        assert_eq!(outcomes[4], Err(libc::EIO));
        assert_eq!(injector.counts().errors_injected, 2);
    });
}

#[test]
fn a_vanished_device_fails_every_request_and_the_scheduler_lives_on() {
    on_each_backend(
        "vanish",
        FaultPlan::default(),
        move |choice, injector, scheduler, file| {
            let before = run_workload(scheduler, file, &[Request::Read(1), Request::Write(40)]);
            assert_eq!(before, [Ok(BLOCK), Ok(BLOCK)]);
            injector.disappear(libc::ENODEV);
            let workload: Vec<Request> = (0..8)
                .map(|index| Request::Write(BLOCKS / 2 + index))
                .chain([Request::Fdatasync, Request::Read(3)])
                .collect();
            let gone = run_workload(scheduler, file, &workload);
            assert!(
                gone.iter().all(|outcome| *outcome == Err(libc::ENODEV)),
                "{choice:?}: {gone:?}"
            );
            // The device comes back: the same scheduler serves it again.
            injector.heal();
            let after = run_workload(scheduler, file, &[Request::Read(2)]);
            assert_eq!(after, [Ok(BLOCK)]);
            let counts = injector.counts();
            assert_eq!(counts.ops_failed_gone, workload.len() as u64);
        },
    );
}

#[test]
fn short_transfers_come_back_as_short_counts() {
    let plan = FaultPlan {
        seed: 7,
        rules: vec![FaultRule::ShortRate {
            per_million: 1_000_000,
        }],
    };
    on_each_backend("short", plan, move |choice, injector, scheduler, file| {
        let outcomes = run_workload(scheduler, file, &[Request::Read(0), Request::Write(33)]);
        assert_eq!(outcomes, [Ok(BLOCK / 2), Ok(BLOCK / 2)], "{choice:?}");
        assert_eq!(injector.counts().short_transfers, 2);
    });
}

/// A backend that refuses every submit call for a while (a broken ring)
/// loses nothing: the requests pushed meanwhile complete once submits go
/// through again. The engine pauses between tries instead of retrying on
/// every turn: over the refusal's 300 ms, pauses doubling from 1 ms allow
/// about ten tries, a retry per turn tens of thousands.
#[test]
fn refused_submits_are_retried_with_pauses_and_lose_nothing() {
    on_each_backend(
        "refused",
        FaultPlan::default(),
        move |choice, injector, scheduler, file| {
            let handle = scheduler.open(&file.path).unwrap();
            let class = scheduler.add_class("c", 1).unwrap();
            injector.refuse_submits(libc::ENXIO);
            let reads: Vec<_> = (0..8u64)
                .map(|block| {
                    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
                    handle.read_at(&class, buffer, block * BLOCK as u64)
                })
                .collect();
            // Make sure the engine took them and met refusals.
            scheduler.stats().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let refused = injector.counts().submits_refused;
            injector.heal();
            for (block, read) in reads.into_iter().enumerate() {
                let (result, buffer) = read.wait();
                assert_eq!(result.unwrap(), BLOCK, "{choice:?}: read {block}");
                assert_eq!(buffer.to_vec(), pattern(block as u64, 0).to_vec());
            }
            assert!(refused >= 1, "{choice:?}: submits were refused");
            assert!(
                refused <= 200,
                "{choice:?}: {refused} tries in 300 ms: the engine does not pause"
            );
            let counts = injector.counts();
            assert_eq!(counts.ops_pushed, counts.ops_completed, "{choice:?}");
        },
    );
}

#[test]
fn shutdown_during_a_stall_waits_for_the_stalled_requests() {
    on_each_backend(
        "stall",
        FaultPlan::default(),
        move |choice, injector, scheduler, file| {
            let handle = scheduler.open(&file.path).unwrap();
            let class = scheduler.add_class("c", 1).unwrap();
            injector.stall_for(Duration::from_millis(300));
            let writes: Vec<_> = (0..16u64)
                .map(|index| {
                    let block = BLOCKS / 2 + index;
                    handle.write_at(&class, pattern(block, 1), block * BLOCK as u64)
                })
                .collect();
            let sync = handle.fdatasync(&class);
            // Shutdown from another thread while the engine holds the stalled
            // writes: it returns only once they are done.
            let stopper = {
                let scheduler = scheduler.clone();
                std::thread::spawn(move || scheduler.shutdown())
            };
            stopper.join().unwrap();
            let counts = injector.counts();
            assert!(
                counts.ops_stalled >= 1,
                "{choice:?}: the stall held ops: {counts:?}"
            );
            assert_eq!(counts.ops_held_now, 0, "shutdown drained the stall");
            assert_eq!(counts.ops_pushed, counts.ops_completed);
            for (index, write) in writes.into_iter().enumerate() {
                let (result, _) = write.wait();
                assert_eq!(result.unwrap(), BLOCK, "{choice:?}: write {index}");
            }
            sync.wait().unwrap();
            for index in 0..16u64 {
                let block = BLOCKS / 2 + index;
                assert_eq!(file.block(block), pattern(block, 1).to_vec());
            }
        },
    );
}

/// An unaligned write past the end truncates its block's zero padding away
/// only while the file still ends where that write left it: a longer
/// extension made by another writer while the write was at the device
/// stays (it used to be cut back to the unaligned write's end).
#[test]
fn an_unaligned_write_past_the_end_keeps_a_longer_extension_made_meanwhile() {
    on_each_backend(
        "unaligned-extension",
        FaultPlan::default(),
        |choice, injector, scheduler, file| {
            use std::os::unix::fs::FileExt;
            let end = BLOCKS * BLOCK as u64;
            let handle = scheduler.open(&file.path).unwrap();
            let class = scheduler.add_class("c", 100).unwrap();
            injector.stall_for(Duration::from_secs(3_600));
            let writer = {
                let scheduler = scheduler.clone();
                std::thread::spawn(move || {
                    scheduler.block_on(handle.write_at_unaligned(&class, &[7; 100], end))
                })
            };
            while injector.counts().ops_stalled == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Another writer extends the file past the stalled write's block.
            let other = std::fs::OpenOptions::new()
                .write(true)
                .open(&file.path)
                .unwrap();
            let far = end + 2 * BLOCK as u64;
            other.write_all_at(&[9; 5000], far).unwrap();
            injector.heal();
            writer.join().unwrap().unwrap();
            let content = std::fs::read(&file.path).unwrap();
            assert_eq!(
                content.len() as u64,
                far + 5000,
                "{choice:?}: the longer extension keeps its length"
            );
            let end = end as usize;
            assert!(content[end..end + 100].iter().all(|&byte| byte == 7));
            assert!(content[far as usize..].iter().all(|&byte| byte == 9));
        },
    );
}
