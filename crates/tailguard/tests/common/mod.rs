//! Helpers shared by this crate's integration tests.

use std::path::PathBuf;

/// The files registered with any io_uring ring of this process, by path, as
/// the kernel lists them in each ring's `/proc/self/fdinfo` ("UserFiles").
/// `None` where no such listing is readable. The kernel skips the list when
/// the ring's lock is busy at that instant: an absence proves nothing, so
/// callers retry before concluding.
pub fn registered_paths() -> Option<Vec<PathBuf>> {
    let mut paths = Vec::new();
    let mut rings = 0;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let is_ring = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().contains("io_uring"));
        let info =
            std::fs::read_to_string(PathBuf::from("/proc/self/fdinfo").join(entry.file_name()));
        let Some(listing) = info
            .ok()
            .filter(|_| is_ring)
            .and_then(|info| Some(info.split_once("UserFiles:")?.1.to_string()))
        else {
            continue;
        };
        rings += 1;
        paths.extend(
            listing
                .lines()
                .skip(1)
                .map_while(|line| line.trim_start().split_once(": "))
                .filter(|(slot, _)| slot.chars().all(|c| c.is_ascii_digit()))
                .map(|(_, path)| PathBuf::from(path)),
        );
    }
    (rings > 0).then_some(paths)
}
