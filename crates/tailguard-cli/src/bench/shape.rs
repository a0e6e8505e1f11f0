//! Request shaping and verification: what a bench job does beyond its
//! scenario pattern.
//!
//! The simulator's workload generator gives each request an offset and a
//! length from the job's pattern and block size. A [`Shape`] reshapes them,
//! per instance, for fio options the generator has no notion of:
//!
//! - **block sizes**: each request's length is drawn from weighted sizes
//!   (`bssplit`), or as fio draws it from a range (`bsrange`, `bs=a-b`):
//!   uniform below the range's top, rounded up to a multiple of its bottom,
//!   at most its top. The job's own block size is the smallest, and offsets
//!   stay multiples of it;
//! - **random and sequential mixes** (`percentage_random`, `rw=randread:N`):
//!   a request goes to a random offset with the given probability, or only
//!   every N requests, and otherwise follows the previous one;
//! - **holes** (`rw=read:N`): sequential requests skip N bytes after each.
//!
//! Random offsets are uniform over the job's region such that the request
//! fits; sequential ones continue from the instance's previous request (its
//! first request's offset to start with) and wrap at the region's end. A
//! job without shaping options passes its requests through untouched.
//!
//! **Verification** (`verify`): a written request's buffer is a block of its
//! own: a header (a magic number, the block's offset, its length, a seed)
//! followed by pseudo-random bytes from that seed, and a 64-bit checksum of
//! all of it in the last eight bytes ([`fill_verified`]). [`check_verified`]
//! finds a block read back that is corrupt, misplaced (another offset's
//! block) or torn (a checksum that does not match).

use tailguard_sim::scenario::JobSpec;

/// How a job's request sizes are drawn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BlockSizes {
    /// Every request has the job's block size.
    #[default]
    Job,
    /// Sizes drawn by their weights (`bssplit`).
    Weighted(Vec<(u64, u32)>),
    /// fio's `bsrange=LOW-HIGH`: a number uniform in `0..high_bytes`,
    /// rounded up to the next multiple of `low_bytes`, at most `high_bytes`.
    /// Every multiple of LOW up to HIGH is equally likely (a HIGH that is
    /// not one gets what is left).
    Range {
        /// The smallest size, and the step between sizes.
        low_bytes: u64,
        /// The largest size.
        high_bytes: u64,
    },
}

impl BlockSizes {
    /// The smallest size it draws, or `None` for the job's own.
    pub fn smallest_bytes(&self) -> Option<u64> {
        match self {
            Self::Job => None,
            Self::Weighted(sizes) => sizes.iter().map(|(bytes, _)| *bytes).min(),
            Self::Range { low_bytes, .. } => Some(*low_bytes),
        }
    }
}

/// How a job's requests are shaped; the default changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// How request sizes are drawn.
    pub block_sizes: BlockSizes,
    /// Percentage of requests at a random offset, the rest sequential
    /// (`percentage_random`); `None`: as the job's pattern says.
    pub random_percent: Option<u32>,
    /// A random job draws a new offset only every this many requests, the
    /// ones between following sequentially (`rw=randread:N`); 0 or 1: every
    /// request.
    pub random_run: u32,
    /// Bytes skipped after each sequential request (`rw=read:N`).
    pub skip_bytes: u64,
}

impl Shape {
    /// Whether it changes nothing.
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// The mean request size, weighted as requests draw their sizes, or
    /// `job_block` when it sets no sizes: what turns a byte rate into a
    /// request rate, or a request count into bytes.
    pub fn mean_size_bytes(&self, job_block: u64) -> f64 {
        match &self.block_sizes {
            BlockSizes::Job => job_block as f64,
            BlockSizes::Weighted(sizes) => {
                let (weighted, total) =
                    sizes
                        .iter()
                        .fold((0.0, 0u64), |(weighted, total), &(bytes, weight)| {
                            (
                                weighted + bytes as f64 * f64::from(weight),
                                total + u64::from(weight),
                            )
                        });
                if total == 0 {
                    job_block as f64
                } else {
                    weighted / total as f64
                }
            }
            &BlockSizes::Range {
                low_bytes,
                high_bytes,
            } => {
                // Steps 1..=whole each have probability low / high; the
                // rest of the range draws high itself.
                let (low, high) = (low_bytes as f64, high_bytes as f64);
                let whole = (high_bytes / low_bytes) as f64;
                let rest = (high_bytes % low_bytes) as f64;
                low * low / high * whole * (whole + 1.0) / 2.0 + rest
            }
        }
    }

    /// The largest request size it can give (`job_block` when it sets none).
    pub fn largest_bytes(&self, job_block: u64) -> u64 {
        match &self.block_sizes {
            BlockSizes::Job => job_block,
            BlockSizes::Weighted(sizes) => sizes
                .iter()
                .map(|(bytes, _)| *bytes)
                .max()
                .unwrap_or(job_block),
            BlockSizes::Range { high_bytes, .. } => *high_bytes,
        }
    }

    /// The sizes of the buffers its requests use: one per size it draws by
    /// weight, or the largest of a range (a request takes the smallest free
    /// buffer that holds it, cut to its length).
    pub fn buffer_sizes(&self, job_block: u64) -> Vec<u64> {
        match &self.block_sizes {
            BlockSizes::Job => vec![job_block],
            BlockSizes::Weighted(sizes) => sizes.iter().map(|(bytes, _)| *bytes).collect(),
            BlockSizes::Range { high_bytes, .. } => vec![*high_bytes],
        }
    }

    /// The size of a new buffer for a request of `length_bytes` when none
    /// is free: a range's largest, which serves any of its requests later.
    pub fn new_buffer_bytes(&self, length_bytes: u64) -> u64 {
        match &self.block_sizes {
            BlockSizes::Range { high_bytes, .. } => length_bytes.max(*high_bytes),
            _ => length_bytes,
        }
    }
}

/// One instance's shaping state.
#[derive(Clone, Debug)]
pub struct ShapeState {
    random: u64,
    cursor: Option<u64>,
    run_left: u32,
}

impl ShapeState {
    /// A state seeded with `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self {
            random: seed | 1,
            cursor: None,
            run_left: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        self.random
    }

    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
    }
}

/// The offset and length of a request the generator placed at
/// `template_offset`, reshaped.
pub fn reshape(
    shape: &Shape,
    state: &mut ShapeState,
    job: &JobSpec,
    template_offset: u64,
) -> (u64, u64) {
    let align = job.block_size_bytes;
    let length = pick_size(shape, state, align);
    let start = job.offset_bytes;
    let end = job.offset_bytes + job.region_bytes;
    let random = match (shape.random_percent, job.pattern.is_random()) {
        (Some(percent), _) => state.below(100) < u64::from(percent),
        (None, true) if shape.random_run > 1 => {
            if state.run_left == 0 {
                state.run_left = shape.random_run - 1;
                true
            } else {
                state.run_left -= 1;
                false
            }
        }
        (None, random) => random,
    };
    let cursor = *state.cursor.get_or_insert(template_offset);
    let offset = if random || cursor + length > end {
        if random {
            let slots = (end.saturating_sub(start + length)) / align + 1;
            start + state.below(slots) * align
        } else {
            start
        }
    } else {
        cursor
    };
    let next = offset + length + shape.skip_bytes;
    state.cursor = Some(if next + align > end {
        start
    } else {
        next.next_multiple_of(align)
    });
    (offset, length)
}

/// A request size drawn as `shape` says (the job's block size when it sets
/// none).
fn pick_size(shape: &Shape, state: &mut ShapeState, job_block: u64) -> u64 {
    match &shape.block_sizes {
        BlockSizes::Job => job_block,
        BlockSizes::Weighted(sizes) => {
            let total: u64 = sizes.iter().map(|(_, weight)| u64::from(*weight)).sum();
            if total == 0 {
                return job_block;
            }
            let mut pick = state.below(total);
            for &(bytes, weight) in sizes {
                if pick < u64::from(weight) {
                    return bytes;
                }
                pick -= u64::from(weight);
            }
            job_block
        }
        &BlockSizes::Range {
            low_bytes,
            high_bytes,
        } => {
            let steps = state.below(high_bytes) / low_bytes + 1;
            (steps * low_bytes).min(high_bytes)
        }
    }
}

/// The first eight bytes of every verified block.
const VERIFY_MAGIC: u64 = 0x7461_696c_6775_6172;
/// Header: magic, offset, length, seed (8 bytes each).
const VERIFY_HEADER_BYTES: usize = 32;

/// A 64-bit checksum (FNV-1a over 8-byte words, then mixed).
fn checksum(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for word in bytes.chunks(8) {
        let mut padded = [0u8; 8];
        padded[..word.len()].copy_from_slice(word);
        hash = (hash ^ u64::from_le_bytes(padded)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^ (hash >> 29)
}

fn word(buffer: &[u8], index: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buffer[index * 8..index * 8 + 8]);
    u64::from_le_bytes(bytes)
}

/// Fills `buffer` (at least 64 bytes) with the verified block for `offset`:
/// header, pseudo-random bytes from `seed`, checksum.
pub fn fill_verified(buffer: &mut [u8], offset: u64, seed: u64) {
    let length = buffer.len();
    let header = [VERIFY_MAGIC, offset, length as u64, seed];
    for (index, value) in header.iter().enumerate() {
        buffer[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
    }
    let mut state = seed | 1;
    crate::bench::target::fill_random(&mut buffer[VERIFY_HEADER_BYTES..length - 8], &mut state);
    let sum = checksum(&buffer[..length - 8]);
    buffer[length - 8..].copy_from_slice(&sum.to_le_bytes());
}

/// Checks a block read back from `offset`: `Err` says what is wrong.
pub fn check_verified(buffer: &[u8], offset: u64) -> Result<(), String> {
    if buffer.len() < 64 || word(buffer, 0) != VERIFY_MAGIC {
        return Err("no verify header: the block is not the one bench wrote".into());
    }
    let length = buffer.len();
    let (written_offset, written_length) = (word(buffer, 1), word(buffer, 2));
    if written_offset != offset {
        return Err(format!(
            "it holds the block written for offset {written_offset} (a misplaced write)"
        ));
    }
    if written_length != length as u64 {
        return Err(format!(
            "it was written {written_length} bytes long, read back {length}"
        ));
    }
    let stored = word(buffer, length / 8 - 1);
    if checksum(&buffer[..length - 8]) != stored {
        return Err("its checksum does not match (corrupt or torn)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use tailguard_sim::scenario::Scenario;

    fn job(pattern: &str) -> JobSpec {
        let text = format!(
            "duration_s = 1\n[[device]]\nname = \"d\"\nmodel = \"nvme\"\n[[class]]\nname = \"c\"\n\
             shares = 1\n[[job]]\nclass = \"c\"\ndevice = \"d\"\npattern = \"{pattern}\"\n\
             block_size = \"4k\"\nqueue_depth = 1\nsize = \"1m\"\noffset = \"1m\"\n"
        );
        Scenario::from_toml(&text).unwrap().jobs[0].clone()
    }

    #[test]
    fn split_sizes_follow_their_weights_and_stay_in_the_region() {
        let shape = Shape {
            block_sizes: BlockSizes::Weighted(vec![(4096, 75), (65536, 25)]),
            ..Shape::default()
        };
        let spec = job("randread");
        let mut state = ShapeState::new(7);
        let mut large = 0;
        for _ in 0..4000 {
            let (offset, length) = reshape(&shape, &mut state, &spec, 1 << 20);
            assert!(
                offset >= 1 << 20 && offset + length <= 2 << 20,
                "{offset} {length}"
            );
            assert_eq!(offset % 4096, 0);
            large += usize::from(length == 65536);
        }
        assert!(
            (800..1200).contains(&large),
            "{large} of 4000 should be about 1000"
        );
    }

    /// Draws `count` sizes from `sizes` and returns how often each came.
    fn draw(sizes: BlockSizes, count: usize) -> BTreeMap<u64, usize> {
        let shape = Shape {
            block_sizes: sizes,
            ..Shape::default()
        };
        let mut state = ShapeState::new(11);
        let mut seen = BTreeMap::new();
        for _ in 0..count {
            *seen.entry(pick_size(&shape, &mut state, 4096)).or_default() += 1;
        }
        seen
    }

    #[test]
    fn a_range_draws_every_multiple_of_its_low_size_as_fio_does() {
        // fio: LOW + HIGH × uniform, rounded down to LOW, at most HIGH:
        // 4k, 8k, 12k and 16k equally.
        let seen = draw(
            BlockSizes::Range {
                low_bytes: 4096,
                high_bytes: 16384,
            },
            40_000,
        );
        assert_eq!(
            seen.keys().copied().collect::<Vec<_>>(),
            [4096, 8192, 12288, 16384]
        );
        for (size, times) in &seen {
            assert!((9_000..11_000).contains(times), "{size}: {times} of 40000");
        }
        // A top that is no multiple of the bottom gets what is left: 4k and
        // 8k each 0.4, 10k 0.2.
        let seen = draw(
            BlockSizes::Range {
                low_bytes: 4096,
                high_bytes: 10240,
            },
            50_000,
        );
        assert_eq!(
            seen.keys().copied().collect::<Vec<_>>(),
            [4096, 8192, 10240]
        );
        assert!((19_000..21_000).contains(&seen[&4096]), "{seen:?}");
        assert!((9_000..11_000).contains(&seen[&10240]), "{seen:?}");
    }

    #[test]
    fn the_mean_size_of_a_range_is_the_mean_of_its_draws() {
        for (low_bytes, high_bytes) in [(4096, 16384), (4096, 10240), (4096, 1 << 20), (8192, 8192)]
        {
            let sizes = BlockSizes::Range {
                low_bytes,
                high_bytes,
            };
            let shape = Shape {
                block_sizes: sizes.clone(),
                ..Shape::default()
            };
            let count = 200_000;
            let drawn: u64 = draw(sizes, count)
                .iter()
                .map(|(size, times)| size * *times as u64)
                .sum();
            let mean = shape.mean_size_bytes(4096);
            let measured = drawn as f64 / count as f64;
            assert!(
                (measured / mean - 1.0).abs() < 0.01,
                "{low_bytes}-{high_bytes}: drawn {measured}, computed {mean}"
            );
            assert_eq!(shape.largest_bytes(4096), high_bytes);
            assert_eq!(shape.buffer_sizes(4096), [high_bytes]);
        }
    }

    #[test]
    fn sequential_requests_follow_each_other_with_holes_and_wrap() {
        let shape = Shape {
            skip_bytes: 4096,
            ..Shape::default()
        };
        let spec = job("seqread");
        let mut state = ShapeState::new(1);
        let offsets: Vec<u64> = (0..3)
            .map(|_| reshape(&shape, &mut state, &spec, 1 << 20).0 - (1 << 20))
            .collect();
        assert_eq!(offsets, [0, 8192, 16384]);
        let plain = Shape {
            random_percent: Some(0),
            ..Shape::default()
        };
        let mut state = ShapeState::new(1);
        let offsets: Vec<u64> = (0..257)
            .map(|_| reshape(&plain, &mut state, &spec, 1 << 20).0 - (1 << 20))
            .collect();
        assert_eq!(offsets[255], 255 * 4096);
        assert_eq!(offsets[256], 0, "wraps at the region's end");
    }

    #[test]
    fn random_runs_draw_a_new_offset_every_n_requests() {
        let shape = Shape {
            random_run: 4,
            ..Shape::default()
        };
        let spec = job("randread");
        let mut state = ShapeState::new(3);
        let offsets: Vec<u64> = (0..8)
            .map(|_| reshape(&shape, &mut state, &spec, 1 << 20).0)
            .collect();
        for run in offsets.chunks(4) {
            assert!(
                run.windows(2)
                    .all(|pair| pair[1] == pair[0] + 4096 || pair[1] == 1 << 20),
                "{offsets:?}"
            );
        }
    }

    #[test]
    fn verification_catches_corruption_misplacement_and_tearing() {
        let mut block = vec![0u8; 4096];
        fill_verified(&mut block, 8192, 42);
        assert_eq!(check_verified(&block, 8192), Ok(()));
        assert!(check_verified(&block, 4096)
            .unwrap_err()
            .contains("misplaced"));
        let mut corrupt = block.clone();
        corrupt[1000] ^= 1;
        assert!(check_verified(&corrupt, 8192)
            .unwrap_err()
            .contains("checksum"));
        let mut torn = block.clone();
        torn[2048..].fill(0);
        assert!(check_verified(&torn, 8192).is_err());
        assert!(check_verified(&[7u8; 4096], 8192)
            .unwrap_err()
            .contains("header"));
    }
}
