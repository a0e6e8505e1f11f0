//! The frontier's arithmetic: medians over rounds, the static Pareto
//! frontier, and how a tailguard point stands against the static settings.
//!
//! Every point is summarised by the median of its rounds (with their min and
//! max). On the plane of disk write rate against the readers' worst 0.5 s rate
//! (over solo), a static point is on the frontier when no other static point
//! writes at least as fast and keeps the readers at least as high, and is
//! better in one of the two. A tailguard point loses to a static point that
//! dominates it beyond the noise: writes at least as fast and reads at least
//! as well, and writes more than [`MATCH_TOLERANCE`] faster or reads more
//! than [`TIE_TOLERANCE`] better ([`dominates_clearly`]). Otherwise it is
//! compared with the static point that keeps the readers highest among those
//! writing within [`MATCH_TOLERANCE`] of its rate (beats, ties or loses), and
//! with none in that window it is unmatched; [`frontier_at`] then
//! still places it against the line joining the frontier's points, from the
//! readers alone (no writer) on (a rate no single static setting gives, but
//! one a writer that alternates between two settings does). Differences within
//! [`TIE_TOLERANCE`] of the solo rate count as a tie: the rounds of one run
//! scatter by about that much on a busy disk.

use serde::Serialize;

/// How far (a fraction of the tailguard point's write rate) a static point's
/// write rate may be from it and still count as the same rate.
pub const MATCH_TOLERANCE: f64 = 0.10;
/// Differences in the worst 0.5 s rate over solo no larger than this are a
/// tie.
pub const TIE_TOLERANCE: f64 = 0.05;
/// Rounding error allowed in comparing differences with the tolerances:
/// `0.80 - 0.75` is a little over 0.05 in binary floating point, and counts
/// as 0.05.
const ROUNDING: f64 = 1e-9;

/// The median, min and max of a measure over rounds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The median (the mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Summary {
    /// Summarises `values`, ignoring NaNs; `None` when nothing is left.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[middle]
        } else {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }
}

/// A point on the trade-off plane: disk write MB/s, and the readers' worst
/// 0.5 s rate over their solo rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    /// Disk write rate, MB/s.
    pub write_mb_per_s: f64,
    /// Readers' worst 0.5 s rate over their solo rate.
    pub worst_ratio: f64,
}

impl Position {
    /// Whether `self` is at least as good as `other` in both and better in one.
    pub fn dominates(&self, other: &Position) -> bool {
        self.write_mb_per_s >= other.write_mb_per_s
            && self.worst_ratio >= other.worst_ratio
            && (self.write_mb_per_s > other.write_mb_per_s || self.worst_ratio > other.worst_ratio)
    }
}

/// Per position, whether no other position dominates it.
pub fn pareto(positions: &[Position]) -> Vec<bool> {
    positions
        .iter()
        .map(|position| !positions.iter().any(|other| other.dominates(position)))
        .collect()
}

/// The index of the position keeping the readers highest among those writing
/// within [`MATCH_TOLERANCE`] of `write_mb_per_s`; of equals, the closest in
/// write rate.
pub fn best_match(write_mb_per_s: f64, positions: &[Position]) -> Option<usize> {
    let window = MATCH_TOLERANCE * write_mb_per_s;
    positions
        .iter()
        .enumerate()
        .filter(|(_, position)| (position.write_mb_per_s - write_mb_per_s).abs() <= window)
        .max_by(|(_, a), (_, b)| {
            a.worst_ratio.total_cmp(&b.worst_ratio).then_with(|| {
                let distance = |p: &Position| (p.write_mb_per_s - write_mb_per_s).abs();
                distance(b).total_cmp(&distance(a))
            })
        })
        .map(|(index, _)| index)
}

/// The readers' worst-rate ratio of the static frontier's line at
/// `write_mb_per_s`: linear between the two frontier points around it; `None`
/// outside the frontier's range of write rates.
pub fn frontier_at(write_mb_per_s: f64, positions: &[Position]) -> Option<f64> {
    let mut frontier: Vec<Position> = positions
        .iter()
        .zip(pareto(positions))
        .filter(|(_, on)| *on)
        .map(|(position, _)| *position)
        .collect();
    frontier.sort_by(|a, b| a.write_mb_per_s.total_cmp(&b.write_mb_per_s));
    frontier.windows(2).find_map(|pair| {
        let (low, high) = (pair[0], pair[1]);
        if !(low.write_mb_per_s..=high.write_mb_per_s).contains(&write_mb_per_s) {
            return None;
        }
        let span = high.write_mb_per_s - low.write_mb_per_s;
        if span <= 0.0 {
            return Some(low.worst_ratio.max(high.worst_ratio));
        }
        let fraction = (write_mb_per_s - low.write_mb_per_s) / span;
        Some(low.worst_ratio + fraction * (high.worst_ratio - low.worst_ratio))
    })
}

/// How a tailguard point stands against the static settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Standing {
    /// The readers keep more than [`TIE_TOLERANCE`] of solo more than with the
    /// best static setting at the same write rate, and no static setting
    /// [`dominates_clearly`].
    Beats,
    /// Within [`TIE_TOLERANCE`] of it, and no static setting dominates
    /// clearly.
    Ties,
    /// Below it by more than [`TIE_TOLERANCE`], or a static setting writes at
    /// least as fast and reads at least as well, and is better in one beyond
    /// the noise ([`dominates_clearly`]).
    Loses,
    /// No static setting writes at its rate, and none dominates it.
    Unmatched,
}

/// A tailguard point against the static settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The verdict.
    pub standing: Standing,
    /// The static position it was compared with (an index into the list
    /// given to [`compare`]).
    pub against: Option<usize>,
    /// Its worst-rate ratio minus that static point's (positive: tailguard
    /// keeps the readers higher).
    pub worst_ratio_difference: Option<f64>,
    /// Whether `against` is the same-rate match (else it dominates from a
    /// higher write rate).
    pub same_rate: bool,
}

/// Compares `point` with the static positions: a static position that
/// [`dominates_clearly`] makes it lose, whatever the same-rate match says;
/// otherwise the match decides, and with no match it is unmatched.
pub fn compare(point: Position, statics: &[Position]) -> Comparison {
    let same_rate = best_match(point.write_mb_per_s, statics).map(|index| {
        let difference = point.worst_ratio - statics[index].worst_ratio;
        let standing = if difference > TIE_TOLERANCE + ROUNDING {
            Standing::Beats
        } else if difference < -(TIE_TOLERANCE + ROUNDING) {
            Standing::Loses
        } else {
            Standing::Ties
        };
        Comparison {
            standing,
            against: Some(index),
            worst_ratio_difference: Some(difference),
            same_rate: true,
        }
    });
    if let Some(loss) = same_rate.filter(|match_| match_.standing == Standing::Loses) {
        return loss;
    }
    // A clearly dominating position that the match did not already make a
    // loss writes beyond the same-rate window.
    let dominating = statics
        .iter()
        .enumerate()
        .filter(|(_, position)| dominates_clearly(position, &point))
        .max_by(|(_, a), (_, b)| {
            (a.worst_ratio.total_cmp(&b.worst_ratio))
                .then(a.write_mb_per_s.total_cmp(&b.write_mb_per_s))
        })
        .map(|(index, _)| index);
    match (dominating, same_rate) {
        (Some(index), _) => Comparison {
            standing: Standing::Loses,
            against: Some(index),
            worst_ratio_difference: Some(point.worst_ratio - statics[index].worst_ratio),
            same_rate: false,
        },
        (None, Some(match_)) => match_,
        (None, None) => Comparison {
            standing: Standing::Unmatched,
            against: None,
            worst_ratio_difference: None,
            same_rate: false,
        },
    }
}

/// Whether the static position `other` dominates `point` beyond the noise:
/// it writes at least as fast and keeps the readers at least as high, and
/// writes faster by more than [`MATCH_TOLERANCE`] or keeps the readers higher
/// by more than [`TIE_TOLERANCE`].
pub fn dominates_clearly(other: &Position, point: &Position) -> bool {
    let writes_more = other.write_mb_per_s - point.write_mb_per_s;
    let reads_more = other.worst_ratio - point.worst_ratio;
    writes_more >= 0.0
        && reads_more >= -ROUNDING
        && (writes_more > MATCH_TOLERANCE * point.write_mb_per_s
            || reads_more > TIE_TOLERANCE + ROUNDING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(write_mb_per_s: f64, worst_ratio: f64) -> Position {
        Position {
            write_mb_per_s,
            worst_ratio,
        }
    }

    #[test]
    fn summaries_take_the_middle_and_the_ends() {
        let odd = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Summary::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((even.median, even.min, even.max), (3.0, 1.0, 10.0));
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN, 5.0]).unwrap().median, 5.0);
    }

    #[test]
    fn the_frontier_keeps_exactly_the_undominated_points() {
        let positions = [
            at(450.0, 0.92),  // frontier: best reads
            at(800.0, 0.76),  // frontier
            at(700.0, 0.70),  // dominated by 800/0.76
            at(1400.0, 0.71), // frontier
            at(1800.0, 0.55), // frontier: fastest
            at(1400.0, 0.60), // dominated by 1400/0.71
            at(450.0, 0.92),  // a duplicate of the first: neither dominates
        ];
        assert_eq!(
            pareto(&positions),
            [true, true, false, true, true, false, true]
        );
        assert_eq!(pareto(&[]), Vec::<bool>::new());
    }

    #[test]
    fn matching_stays_within_ten_percent_and_takes_the_best_reads() {
        let statics = [at(459.0, 0.92), at(825.0, 0.76), at(900.0, 0.80)];
        // 834: 825 (1%) and 900 (8%) are in the window; 900 reads better.
        assert_eq!(best_match(834.0, &statics), Some(2));
        // 1000: only 900 (10%) is in; at 1001 it is out.
        assert_eq!(best_match(1000.0, &statics), Some(2));
        assert_eq!(best_match(1001.0, &statics), None);
        assert_eq!(best_match(600.0, &statics), None);
        // Equal reads: the closer write rate wins.
        let equal = [at(95.0, 0.5), at(101.0, 0.5)];
        assert_eq!(best_match(100.0, &equal), Some(1));
    }

    #[test]
    fn the_frontier_line_is_interpolated_between_its_points() {
        let statics = [
            at(400.0, 0.9),
            at(800.0, 0.5),
            at(600.0, 0.4),
            at(1200.0, 0.3),
        ];
        // 600/0.4 is dominated by 800/0.5: the line runs 400 -> 800 -> 1200.
        assert!((frontier_at(600.0, &statics).unwrap() - 0.7).abs() < 1e-9);
        assert!((frontier_at(1000.0, &statics).unwrap() - 0.4).abs() < 1e-9);
        assert_eq!(frontier_at(400.0, &statics), Some(0.9));
        assert_eq!(frontier_at(399.0, &statics), None);
        assert_eq!(frontier_at(1201.0, &statics), None);
        assert_eq!(frontier_at(500.0, &[at(400.0, 0.9)]), None);
    }

    #[test]
    fn a_comparison_says_beats_ties_loses_or_unmatched() {
        let statics = [at(459.0, 0.92), at(825.0, 0.76), at(1404.0, 0.71)];
        let losing = compare(at(834.0, 0.55), &statics);
        assert_eq!(losing.standing, Standing::Loses);
        assert_eq!(losing.against, Some(1));
        assert!((losing.worst_ratio_difference.unwrap() + 0.21).abs() < 1e-9);
        assert!(losing.same_rate);
        assert_eq!(compare(at(834.0, 0.79), &statics).standing, Standing::Ties);
        assert_eq!(compare(at(834.0, 0.90), &statics).standing, Standing::Beats);
        // Exactly the tolerance apart is a tie, whichever way the binary
        // fractions round.
        let tie = [at(100.0, 0.75)];
        assert_eq!(compare(at(100.0, 0.80), &tie).standing, Standing::Ties);
        assert_eq!(compare(at(100.0, 0.70), &tie).standing, Standing::Ties);
        assert_eq!(compare(at(100.0, 0.81), &tie).standing, Standing::Beats);
        // No static point near 1100 MB/s, but 1404/0.71 writes more and reads
        // better: a loss against it.
        let dominated = compare(at(1100.0, 0.60), &statics);
        assert_eq!(dominated.standing, Standing::Loses);
        assert_eq!((dominated.against, dominated.same_rate), (Some(2), false));
        // Nobody near, nobody better on both: unmatched.
        let alone = compare(at(1100.0, 0.80), &statics);
        assert_eq!(alone.standing, Standing::Unmatched);
        assert_eq!(alone.against, None);
    }

    #[test]
    fn a_clearly_dominating_static_point_turns_a_win_or_a_tie_into_a_loss() {
        // 1000/0.70 beats 950/0.55 at its rate, but 1300/0.80 writes 30%
        // more and keeps the readers 0.10 higher.
        let statics = [at(950.0, 0.55), at(1300.0, 0.80)];
        let dominated = compare(at(1000.0, 0.70), &statics);
        assert_eq!(dominated.standing, Standing::Loses);
        assert_eq!((dominated.against, dominated.same_rate), (Some(1), false));
        assert!((dominated.worst_ratio_difference.unwrap() + 0.10).abs() < 1e-9);
        // A tie at its rate, and a static point writing 30% more with the
        // readers as high.
        let faster = [at(1000.0, 0.70), at(1300.0, 0.70)];
        let tie_lost = compare(at(1000.0, 0.70), &faster);
        assert_eq!(tie_lost.standing, Standing::Loses);
        assert_eq!(tie_lost.against, Some(1));
        // Better on both, but within the noise on both: still a tie.
        let close = [at(1080.0, 0.73)];
        assert_eq!(compare(at(1000.0, 0.70), &close).standing, Standing::Ties);
        // Faster but keeping the readers lower: no dominance, still a win.
        let lower = [at(950.0, 0.55), at(1300.0, 0.69)];
        assert_eq!(compare(at(1000.0, 0.70), &lower).standing, Standing::Beats);
    }
}
