//! The points a frontier measures, and the flags that pick them.
//!
//! A point is one way of running the writer beside the readers ([`Setting`]):
//! the readers alone (the reference every ratio divides by), a static setting
//! (kernel O_DIRECT at a fixed queue depth and request size, no scheduler), or
//! tailguard (its settings as given, the adaptive controller, or a read latency
//! target). A [`Grid`] is the cross product of the static depths and sizes plus
//! the tailguard variants; [`Grid::points`] lists them solo first, then static
//! (by depth, then size), then tailguard, which is the order of the first round.
//!
//! The flags' values are parsed here (`--depths 1,2`, `--sizes 128k,1m`,
//! `--latency-targets 500us,2ms`), so what reaches the engine is numbers.

use crate::error::CliError;
use tailguard_sim::scenario::parse_bytes;

/// Request sizes must be whole multiples of this, as O_DIRECT needs.
pub const REQUEST_ALIGNMENT_BYTES: u64 = 4096;
/// The largest static queue depth accepted.
pub const QUEUE_DEPTH_MAX: u32 = 256;
/// The largest static request size accepted (16 MiB).
pub const REQUEST_BYTES_MAX: u64 = 16 << 20;

/// The full grid's queue depths.
pub const DEPTHS_FULL: [u32; 4] = [1, 2, 4, 8];
/// The full grid's request sizes: 64 KiB to 1 MiB.
pub const SIZES_FULL: [u64; 5] = [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20];
/// The full grid's latency targets, in microseconds.
pub const LATENCY_TARGETS_US_FULL: [u64; 5] = [250, 500, 1_000, 2_000, 4_000];
/// `--quick`'s queue depths.
pub const DEPTHS_QUICK: [u32; 2] = [1, 2];
/// `--quick`'s request sizes.
pub const SIZES_QUICK: [u64; 3] = [128 << 10, 256 << 10, 1 << 20];
/// `--quick`'s latency targets, in microseconds.
pub const LATENCY_TARGETS_US_QUICK: [u64; 2] = [500, 2_000];

/// How the writer runs beside the readers in one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// The readers alone, kernel O_DIRECT: the reference.
    Solo,
    /// Readers and writer kernel O_DIRECT, no scheduler; the writer keeps
    /// `queue_depth` requests of `request_bytes` in flight.
    Static {
        /// Writes in flight.
        queue_depth: u32,
        /// Bytes per write.
        request_bytes: u64,
    },
    /// Readers and writer through tailguard.
    Tailguard(Variant),
}

/// Which tailguard configuration a point runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The scheduler settings as given on the command line (with none: the
    /// library's defaults).
    Default,
    /// The given settings with the adaptive controller.
    Adaptive,
    /// The given settings with this read latency target.
    LatencyTarget {
        /// The target, in microseconds.
        target_us: u64,
    },
}

impl Setting {
    /// The point's name in tables, charts and JSON.
    pub fn name(&self) -> String {
        match self {
            Self::Solo => "solo".into(),
            Self::Static {
                queue_depth,
                request_bytes,
            } => format!("direct QD{queue_depth} {}", size_label(*request_bytes)),
            Self::Tailguard(Variant::Default) => "tailguard".into(),
            Self::Tailguard(Variant::Adaptive) => "tailguard adaptive".into(),
            Self::Tailguard(Variant::LatencyTarget { target_us }) => {
                format!("tailguard {}", target_label(*target_us))
            }
        }
    }

    /// `solo`, `static` or `tailguard`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Solo => "solo",
            Self::Static { .. } => "static",
            Self::Tailguard(_) => "tailguard",
        }
    }

    /// Whether this is a static setting.
    pub fn is_static(&self) -> bool {
        matches!(self, Self::Static { .. })
    }

    /// Whether this is a tailguard point.
    pub fn is_tailguard(&self) -> bool {
        matches!(self, Self::Tailguard(_))
    }
}

/// A request size as flags write it: `128k`, `1m`, or bytes.
pub fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}m", bytes >> 20)
    } else if bytes % 1024 == 0 {
        format!("{}k", bytes >> 10)
    } else {
        format!("{bytes}")
    }
}

/// A latency target as flags write it: `500us`, `2ms`.
pub fn target_label(target_us: u64) -> String {
    if target_us >= 1_000 && target_us % 1_000 == 0 {
        format!("{}ms", target_us / 1_000)
    } else {
        format!("{target_us}us")
    }
}

/// The points to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Static queue depths.
    pub depths: Vec<u32>,
    /// Static request sizes, in bytes.
    pub sizes_bytes: Vec<u64>,
    /// Tailguard latency targets, in microseconds.
    pub latency_targets_us: Vec<u64>,
    /// Whether tailguard's adaptive controller is a point of its own.
    pub adaptive: bool,
}

impl Grid {
    /// The full grid, or `--quick`'s.
    pub fn standard(quick: bool) -> Self {
        if quick {
            Self {
                depths: DEPTHS_QUICK.to_vec(),
                sizes_bytes: SIZES_QUICK.to_vec(),
                latency_targets_us: LATENCY_TARGETS_US_QUICK.to_vec(),
                adaptive: true,
            }
        } else {
            Self {
                depths: DEPTHS_FULL.to_vec(),
                sizes_bytes: SIZES_FULL.to_vec(),
                latency_targets_us: LATENCY_TARGETS_US_FULL.to_vec(),
                adaptive: true,
            }
        }
    }

    /// Every point: solo, the static settings (by depth, then size), then
    /// tailguard (default, adaptive, the targets).
    pub fn points(&self) -> Vec<Setting> {
        let mut points = vec![Setting::Solo];
        for &queue_depth in &self.depths {
            for &request_bytes in &self.sizes_bytes {
                points.push(Setting::Static {
                    queue_depth,
                    request_bytes,
                });
            }
        }
        points.push(Setting::Tailguard(Variant::Default));
        if self.adaptive {
            points.push(Setting::Tailguard(Variant::Adaptive));
        }
        for &target_us in &self.latency_targets_us {
            points.push(Setting::Tailguard(Variant::LatencyTarget { target_us }));
        }
        points
    }
}

/// One `--depths` value: a queue depth in 1..=[`QUEUE_DEPTH_MAX`].
pub fn parse_depth(text: &str) -> Result<u32, CliError> {
    let depth: u32 = text.trim().parse().map_err(|_| {
        CliError::usage(format!(
            "`{text}` is not a queue depth; write whole numbers, e.g. --depths 1,2,4"
        ))
    })?;
    if !(1..=QUEUE_DEPTH_MAX).contains(&depth) {
        return Err(CliError::usage(format!(
            "queue depth {depth} is out of range; give 1 to {QUEUE_DEPTH_MAX}"
        )));
    }
    Ok(depth)
}

/// One `--sizes` value: `64k`, `1m`, or bytes; a multiple of 4 KiB up to 16 MiB.
pub fn parse_size(text: &str) -> Result<u64, CliError> {
    let bytes = parse_bytes(text).map_err(CliError::usage)?;
    if bytes == 0 || bytes % REQUEST_ALIGNMENT_BYTES != 0 || bytes > REQUEST_BYTES_MAX {
        return Err(CliError::usage(format!(
            "request size `{text}` must be a multiple of 4 KiB from 4k to 16m (O_DIRECT), \
             e.g. --sizes 128k,1m"
        )));
    }
    Ok(bytes)
}

/// One `--latency-targets` value: `250us` (or `250µs`), `2ms`, or plain
/// microseconds; from 10 µs to 10 s.
pub fn parse_latency_target(text: &str) -> Result<u64, CliError> {
    let trimmed = text.trim();
    let (number, scale_us) = if let Some(number) = trimmed
        .strip_suffix("us")
        .or_else(|| trimmed.strip_suffix("µs"))
    {
        (number, 1.0)
    } else if let Some(number) = trimmed.strip_suffix("ms") {
        (number, 1e3)
    } else if let Some(number) = trimmed.strip_suffix('s') {
        (number, 1e6)
    } else {
        (trimmed, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        CliError::usage(format!(
            "`{text}` is not a latency; write e.g. 500us or 2ms (--latency-targets 500us,2ms)"
        ))
    })?;
    let target_us = (value * scale_us).round();
    if !(10.0..=10e6).contains(&target_us) {
        return Err(CliError::usage(format!(
            "latency target `{text}` is out of range; give 10us to 10s"
        )));
    }
    Ok(target_us as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_must_suit_o_direct() {
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("131072"), Ok(128 << 10));
        for bad in ["0", "6k", "1000", "32m", "big"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn depths_and_targets_parse_within_their_ranges() {
        assert_eq!(parse_depth("8"), Ok(8));
        assert!(parse_depth("0").is_err() && parse_depth("1k").is_err());
        assert!(parse_depth("257").is_err());
        assert_eq!(parse_latency_target("250us"), Ok(250));
        assert_eq!(parse_latency_target("250µs"), Ok(250));
        assert_eq!(parse_latency_target("2ms"), Ok(2_000));
        assert_eq!(parse_latency_target("1.5ms"), Ok(1_500));
        assert_eq!(parse_latency_target("750"), Ok(750));
        assert!(parse_latency_target("1us").is_err());
        assert!(parse_latency_target("fast").is_err());
    }

    #[test]
    fn labels_read_back_as_the_same_values() {
        for bytes in SIZES_FULL {
            assert_eq!(parse_size(&size_label(bytes)), Ok(bytes));
        }
        for target_us in LATENCY_TARGETS_US_FULL.into_iter().chain([1_500]) {
            assert_eq!(
                parse_latency_target(&target_label(target_us)),
                Ok(target_us)
            );
        }
    }

    #[test]
    fn a_grid_lists_solo_then_static_then_tailguard() {
        let grid = Grid {
            depths: vec![1, 2],
            sizes_bytes: vec![128 << 10, 1 << 20],
            latency_targets_us: vec![500],
            adaptive: true,
        };
        let names: Vec<String> = grid.points().iter().map(Setting::name).collect();
        assert_eq!(
            names,
            [
                "solo",
                "direct QD1 128k",
                "direct QD1 1m",
                "direct QD2 128k",
                "direct QD2 1m",
                "tailguard",
                "tailguard adaptive",
                "tailguard 500us",
            ]
        );
        let full = Grid::standard(false).points();
        assert_eq!(full.iter().filter(|point| point.is_static()).count(), 20);
        assert_eq!(full.iter().filter(|point| point.is_tailguard()).count(), 7);
        assert!(Grid::standard(true).points().len() < full.len());
    }
}
