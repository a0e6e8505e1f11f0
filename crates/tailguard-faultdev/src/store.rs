//! The device's data: a durable image and a volatile write cache.
//!
//! With the cache on, a write lands in the cache (whole 512-byte sectors,
//! filled from the image where the write covers part of one); reads see the
//! cache over the image; a flush (the FUSE `fsync` the loop device sends for
//! a block-layer flush) moves the cache into the image; a power cut throws
//! the cache away, so exactly what was written and not flushed is lost. With
//! the cache off, writes go to the image at once.

use std::collections::HashMap;

/// Bytes per sector of the cache.
pub const SECTOR_BYTES: u64 = 512;

pub(crate) struct Store {
    image: Vec<u8>,
    cache: HashMap<u64, Box<[u8]>>,
    volatile_cache: bool,
}

impl Store {
    pub(crate) fn new(size_bytes: u64, volatile_cache: bool) -> Self {
        Self {
            image: vec![0; size_bytes as usize],
            cache: HashMap::new(),
            volatile_cache,
        }
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.image.len() as u64
    }

    /// The bytes at `offset`, at most `length`, clipped to the device.
    pub(crate) fn read(&self, offset: u64, length: u64) -> Vec<u8> {
        let start = offset.min(self.size_bytes());
        let end = offset.saturating_add(length).min(self.size_bytes());
        let mut data = self.image[start as usize..end as usize].to_vec();
        if self.cache.is_empty() {
            return data;
        }
        for sector in start / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES) {
            if let Some(cached) = self.cache.get(&sector) {
                let (from, to, within) = overlap(sector, start, end);
                data[(from - start) as usize..(to - start) as usize]
                    .copy_from_slice(&cached[within..within + (to - from) as usize]);
            }
        }
        data
    }

    /// Writes `data` at `offset`, clipped to the device; returns the bytes written.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> u64 {
        let start = offset.min(self.size_bytes());
        let end = offset
            .saturating_add(data.len() as u64)
            .min(self.size_bytes());
        if !self.volatile_cache {
            self.image[start as usize..end as usize]
                .copy_from_slice(&data[..(end - start) as usize]);
            return end - start;
        }
        for sector in start / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES) {
            let image = &self.image;
            let cached = self.cache.entry(sector).or_insert_with(|| {
                let base = (sector * SECTOR_BYTES) as usize;
                image[base..base + SECTOR_BYTES as usize].into()
            });
            let (from, to, within) = overlap(sector, start, end);
            cached[within..within + (to - from) as usize]
                .copy_from_slice(&data[(from - start) as usize..(to - start) as usize]);
        }
        end - start
    }

    /// Makes everything written durable.
    pub(crate) fn flush(&mut self) {
        for (sector, data) in self.cache.drain() {
            let base = (sector * SECTOR_BYTES) as usize;
            self.image[base..base + data.len()].copy_from_slice(&data);
        }
    }

    /// Loses the cache; returns how many sectors were lost.
    pub(crate) fn power_cut(&mut self) -> u64 {
        let lost = self.cache.len() as u64;
        self.cache.clear();
        lost
    }

    /// Sectors written and not yet flushed.
    pub(crate) fn dirty_sectors(&self) -> u64 {
        self.cache.len() as u64
    }
}

/// The part of `sector` inside `start..end`: its byte range on the device,
/// and where it starts within the sector.
fn overlap(sector: u64, start: u64, end: u64) -> (u64, u64, usize) {
    let sector_start = sector * SECTOR_BYTES;
    let from = start.max(sector_start);
    let to = end.min(sector_start + SECTOR_BYTES);
    (from, to, (from - sector_start) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflushed_writes_are_read_back_and_lost_at_a_power_cut() {
        let mut store = Store::new(8 * SECTOR_BYTES, true);
        store.write(100, &[1; 1100]);
        store.flush();
        store.write(1000, &[2; 100]);
        assert_eq!(store.read(1000, 100), vec![2; 100]);
        assert_eq!(store.read(99, 2), vec![0, 1]);
        assert_eq!(store.read(1099, 2), vec![2, 1]);
        assert_eq!(store.dirty_sectors(), 2, "1000..1100 spans sectors 1 and 2");
        assert_eq!(store.power_cut(), 2);
        assert_eq!(
            store.read(1000, 100)[..],
            [1; 100][..],
            "the flushed bytes survive"
        );
        assert_eq!(store.read(1200, 10), vec![0; 10]);
        assert_eq!(store.read(8 * SECTOR_BYTES - 4, 100).len(), 4, "clipped");
    }

    #[test]
    fn without_the_cache_writes_are_durable_at_once() {
        let mut store = Store::new(4 * SECTOR_BYTES, false);
        store.write(10, &[3; 20]);
        assert_eq!(store.power_cut(), 0);
        assert_eq!(store.read(10, 20), vec![3; 20]);
    }
}
