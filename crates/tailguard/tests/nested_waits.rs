//! Waits that another session of the same engine must not strand: a wait
//! nested in a `block_on` of the same scheduler, and a thread that waits
//! while another thread holds the engine ([`Scheduler::hold_engine`]) and
//! then blocks on something else. Each loops many times so that the
//! interleaving that strands a waiter (its attempt to run the engine finds
//! it busy, and the thread running it leaves with its session open) comes
//! up; a stranded waiter hangs, and the watchdog fails the test.

mod common;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;
use tailguard::{AlignedBuffer, BackendChoice, IoClass, Scheduler};

const BLOCK: usize = 4096;
const FILE_BLOCKS: u64 = 256;
const ROUNDS: u64 = 1500;
/// The most a test may take before it counts as hung (a stranded waiter).
const WATCHDOG: Duration = Duration::from_secs(120);

/// A scheduler on `choice` with a file of real data open on it (reads reach
/// the device, so the engine waits for them), or `None` where io_uring is
/// refused.
fn scheduler_and_file(
    choice: BackendChoice,
    name: &str,
) -> Option<(Scheduler, Arc<tailguard::File>, PathBuf)> {
    let scheduler = common::build_on(choice, Scheduler::builder())?;
    let path = common::scratch("nested-waits-tests", name);
    std::fs::write(&path, vec![7u8; BLOCK * FILE_BLOCKS as usize]).unwrap();
    let file = Arc::new(common::open_read_write(&scheduler, &path));
    Some((scheduler, file, path))
}

fn read(
    file: &tailguard::File,
    class: &IoClass,
    block: u64,
) -> tailguard::IoFuture<tailguard::BufResult> {
    let buffer = AlignedBuffer::new(BLOCK, BLOCK).unwrap();
    file.read_at(class, buffer, (block % FILE_BLOCKS) * BLOCK as u64)
}

/// A read awaited in `block_on`, then, inside the same future, a read waited
/// for with `IoFuture::wait` and one with a nested `block_on` of the same
/// scheduler: the outer call's helping session must not keep the engine
/// thread parked while the inner wait blocks.
#[test]
fn a_wait_nested_in_block_on_of_the_same_scheduler_completes() {
    common::watched(WATCHDOG, || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let Some((scheduler, file, path)) =
                scheduler_and_file(choice, &format!("nested-{choice:?}"))
            else {
                continue;
            };
            let class = scheduler.add_class("reads", 100).unwrap();
            for round in 0..ROUNDS {
                let (file, class, inner) = (&file, &class, &scheduler);
                scheduler.block_on(async move {
                    assert_eq!(read(file, class, round).await.0.unwrap(), BLOCK);
                    assert_eq!(read(file, class, round + 1).wait().0.unwrap(), BLOCK);
                    let nested = inner.block_on(read(file, class, round + 2));
                    assert_eq!(nested.0.unwrap(), BLOCK);
                });
            }
            drop(file);
            drop(scheduler);
            let _ = std::fs::remove_file(path);
        }
    });
}

/// One thread holds the engine and reads in `block_on`, then blocks until
/// a second thread's `IoFuture::wait` returns; the second thread starts its
/// wait while the first runs the engine. The holder's open session must not
/// leave the second thread's request unserved.
#[test]
fn a_wait_beside_a_hold_whose_thread_blocks_elsewhere_completes() {
    common::watched(WATCHDOG, || {
        for choice in [BackendChoice::Threads, BackendChoice::IoUring] {
            let Some((scheduler, file, path)) =
                scheduler_and_file(choice, &format!("beside-hold-{choice:?}"))
            else {
                continue;
            };
            let class = scheduler.add_class("reads", 100).unwrap();
            let start = Arc::new(Barrier::new(2));
            let (done, waited) = mpsc::channel::<()>();
            let waiter = {
                let (scheduler, file, class, start) = (
                    scheduler.clone(),
                    file.clone(),
                    class.clone(),
                    start.clone(),
                );
                std::thread::spawn(move || {
                    for round in 0..ROUNDS {
                        start.wait();
                        assert_eq!(read(&file, &class, round).wait().0.unwrap(), BLOCK);
                        done.send(()).unwrap();
                    }
                    drop(scheduler);
                })
            };
            let hold = scheduler.hold_engine();
            for round in 0..ROUNDS {
                start.wait();
                let result = scheduler.block_on(read(&file, &class, round + 7));
                assert_eq!(result.0.unwrap(), BLOCK);
                waited.recv().unwrap();
            }
            drop(hold);
            waiter.join().unwrap();
            drop(file);
            drop(scheduler);
            let _ = std::fs::remove_file(path);
        }
    });
}
