//! Helpers shared by this crate's integration tests: starting a fault device
//! (or saying why the test skips), and running a case on its own thread under
//! a watchdog while the test thread keeps the device, so that the device is
//! healed and torn down on every path.
//!
//! Each test file compiles this module on its own and uses only part of it,
//! hence the `dead_code` allowance.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;
use tailguard_faultdev::{DeviceConfig, FaultDevError, FaultDevice};

/// Where the tests' devices and files live: cargo's per-test temporary
/// directory, on a disk.
pub fn test_directory() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// A fault device with `config` for the test `name`, or `None` (with the
/// reason printed) where fault devices cannot run here.
pub fn start_device(name: &str, config: DeviceConfig) -> Option<FaultDevice> {
    if let Some(reason) = FaultDevice::unavailable() {
        println!("skipping {name}: {reason}");
        return None;
    }
    match FaultDevice::start(config, &test_directory()) {
        Ok(device) => Some(device),
        Err(FaultDevError::Unavailable(reason)) => {
            println!("skipping {name}: {reason}");
            None
        }
        Err(error) => panic!("{name}: {error}"),
    }
}

/// A test case running on a thread of its own.
pub struct Watched {
    receiver: mpsc::Receiver<std::thread::Result<()>>,
}

impl Watched {
    /// Starts `case` on a new thread; a panic in it is caught and kept.
    pub fn spawn(case: impl FnOnce() + Send + 'static) -> Self {
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
            let _ = sender.send(outcome);
        });
        Self { receiver }
    }

    /// Waits up to `limit` for the case: its outcome, or `None` if it is still
    /// running.
    pub fn wait(&self, limit: Duration) -> Option<std::thread::Result<()>> {
        self.receiver.recv_timeout(limit).ok()
    }
}

/// Ends the test `name` as its case did: re-raises the case's panic, or fails
/// as a hang when the case did not finish within `limit` (`outcome` `None`).
pub fn finish(name: &str, outcome: Option<std::thread::Result<()>>, limit: Duration) {
    match outcome {
        Some(Ok(())) => {}
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => panic!("{name}: hang: not finished within {limit:?}"),
    }
}
