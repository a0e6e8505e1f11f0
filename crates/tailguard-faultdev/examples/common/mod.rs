//! Helpers the seed examples share: their command-line flags, the
//! min/median/max they print, and O_DIRECT writes to a device.
//!
//! Each example compiles this module on its own and uses only part of it,
//! hence the `dead_code` allowance.

#![allow(dead_code)]

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;

/// The value after the flag `name` on the command line, if given.
pub fn argument(name: &str) -> Option<String> {
    let arguments: Vec<String> = std::env::args().collect();
    arguments
        .iter()
        .position(|argument| argument == name)
        .and_then(|index| arguments.get(index + 1))
        .cloned()
}

/// The number after the flag `name`, or `default` without the flag; exits
/// with a message naming the flag when the value is not such a number.
pub fn number<T: FromStr>(name: &str, default: T) -> T {
    match argument(name) {
        None => default,
        Some(value) => value.parse().unwrap_or_else(|_| {
            eprintln!("{name}: {value:?} is not a number of the kind it takes");
            std::process::exit(2);
        }),
    }
}

/// The least, median and greatest of `rates`.
pub fn summary(rates: &[f64]) -> (f64, f64, f64) {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    )
}

/// `path` opened for O_DIRECT writes.
pub fn open_direct_write(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap_or_else(|error| panic!("open {} with O_DIRECT: {error}", path.display()))
}
