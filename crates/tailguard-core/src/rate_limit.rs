//! Per-class rate limits: token buckets in bytes per second and operations per second.
//!
//! Shares split the device time that is free among backlogged classes; a rate
//! limit is a ceiling that holds a class down even when the device is idle
//! (compaction that must not take more than 50 MB/s whatever else runs). A class
//! may have a [`RateLimit`] in bytes per second, in operations per second, or
//! both; each is a [`TokenBucket`].
//!
//! ## The bucket
//!
//! A bucket holds a *balance* of units (bytes or operations) that grows at the
//! rate and is capped at the burst: `rate × burst_ns`, and at least one unit.
//! Dispatching a piece subtracts its units, and the balance may go negative:
//! a debt. A class is *eligible* while every bucket it has is at or above zero,
//! so a piece larger than the whole burst still goes (no class can be stalled
//! forever by a cap smaller than its requests), and the debt it leaves is paid
//! back, at the rate, before the class's next piece. Over any interval `T` a
//! backlogged capped class therefore moves at most `rate × T + burst + one
//! piece`, and at least `rate × T − one piece` when the device keeps up, so the
//! long-run rate is the cap itself.
//!
//! The balance is kept in *unit-nanoseconds* (units × 10^9) in `i128`, so
//! refilling `elapsed_ns × rate` is exact integer arithmetic: no rounding
//! drifts over long runs, and the same times give the same decisions in the
//! simulator and in the engine. Nothing here reads a clock; every call takes
//! `now`. A time earlier than the last one seen counts as no time passed.
//!
//! ## What counts
//!
//! Bytes are the bytes of each piece as it is dispatched. An operation is one
//! request as the caller submitted it: a request the dispatcher splits into
//! pieces counts once (on its first piece), and a sync, which moves no bytes,
//! counts as one operation. This is the caller's unit, and it does not change
//! when the budget (and with it the split size) does.
//!
//! ## Burst: the tunable
//!
//! [`RateLimit::burst_ns`] (default [`DEFAULT_BURST_NS`]) is how many
//! nanoseconds of the rate a class that was idle may spend at once. Larger
//! bursts let a capped class absorb a late wake-up of the engine or a short
//! spike without losing throughput; smaller ones keep its instantaneous rate
//! closer to the cap, and so its interference with other classes smaller.

use crate::error::CoreError;
use crate::request::{Nanos, NANOS_PER_SECOND};

/// How long a burst lasts by default: 20 ms at the rate. Short enough that a
/// capped class's worst second stays within a few percent of its cap, long
/// enough to absorb an engine that wakes a few milliseconds late.
pub const DEFAULT_BURST_NS: Nanos = 20_000_000;

/// The longest burst accepted: one hour at the rate.
pub const BURST_NS_MAX: Nanos = 3_600 * NANOS_PER_SECOND;

/// A ceiling on a class's throughput; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// Bytes per second (reads and writes together), if capped.
    pub bytes_per_s: Option<u64>,
    /// Operations (requests) per second, if capped.
    pub iops: Option<u64>,
    /// How much of the rate, in nanoseconds, an idle class may spend at once:
    /// larger absorbs late wake-ups and spikes, smaller tracks the cap closer.
    pub burst_ns: Nanos,
}

impl RateLimit {
    /// A cap in bytes per second only, with the default burst.
    pub fn bytes_per_s(bytes_per_s: u64) -> Self {
        Self {
            bytes_per_s: Some(bytes_per_s),
            iops: None,
            burst_ns: DEFAULT_BURST_NS,
        }
    }

    /// A cap in operations per second only, with the default burst.
    pub fn iops(iops: u64) -> Self {
        Self {
            bytes_per_s: None,
            iops: Some(iops),
            burst_ns: DEFAULT_BURST_NS,
        }
    }

    /// This limit with a cap in bytes per second too.
    pub fn with_bytes_per_s(self, bytes_per_s: u64) -> Self {
        Self {
            bytes_per_s: Some(bytes_per_s),
            ..self
        }
    }

    /// This limit with a cap in operations per second too.
    pub fn with_iops(self, iops: u64) -> Self {
        Self {
            iops: Some(iops),
            ..self
        }
    }

    /// This limit with another burst.
    pub fn with_burst_ns(self, burst_ns: Nanos) -> Self {
        Self { burst_ns, ..self }
    }

    /// Checks that the limit caps something, with rates above zero and a burst
    /// within `1..=BURST_NS_MAX`.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.bytes_per_s.is_none() && self.iops.is_none() {
            return Err(CoreError::NothingCapped);
        }
        if self.bytes_per_s == Some(0) {
            return Err(CoreError::ZeroRate("bytes_per_s"));
        }
        if self.iops == Some(0) {
            return Err(CoreError::ZeroRate("iops"));
        }
        if !(1..=BURST_NS_MAX).contains(&self.burst_ns) {
            return Err(CoreError::InvalidBurst(self.burst_ns));
        }
        Ok(())
    }
}

/// One bucket: units per second with a burst; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// Units per second.
    rate: u64,
    /// The largest balance, in unit-nanoseconds.
    capacity: i128,
    /// The balance in unit-nanoseconds; negative is a debt.
    balance: i128,
    /// When the balance was last brought up to date.
    updated_at: Nanos,
}

impl TokenBucket {
    /// A full bucket of `rate` units per second holding `burst_ns` of it (at
    /// least one unit), as of `now`. `rate` must be at least 1.
    pub fn new(now: Nanos, rate: u64, burst_ns: Nanos) -> Self {
        assert!(rate > 0, "a token bucket needs a rate of at least 1");
        let capacity = (i128::from(rate) * i128::from(burst_ns)).max(i128::from(NANOS_PER_SECOND));
        Self {
            rate,
            capacity,
            balance: capacity,
            updated_at: now,
        }
    }

    /// Units per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Brings the balance up to `now`.
    pub fn refill(&mut self, now: Nanos) {
        if now <= self.updated_at {
            return;
        }
        let elapsed = i128::from(now - self.updated_at);
        self.balance = (self.balance + elapsed * i128::from(self.rate)).min(self.capacity);
        self.updated_at = now;
    }

    /// Takes `units` at `now` (the balance may go negative).
    pub fn take(&mut self, now: Nanos, units: u64) {
        self.refill(now);
        self.balance -= i128::from(units) * i128::from(NANOS_PER_SECOND);
    }

    /// Whether the balance is not negative at `now`.
    pub fn is_eligible(&mut self, now: Nanos) -> bool {
        self.refill(now);
        self.balance >= 0
    }

    /// When the balance reaches zero: at or before the last update if it is
    /// not negative.
    pub fn eligible_at(&self) -> Nanos {
        if self.balance >= 0 {
            return self.updated_at;
        }
        let debt = -self.balance;
        let rate = i128::from(self.rate);
        let wait = (debt + rate - 1) / rate;
        self.updated_at
            .saturating_add(Nanos::try_from(wait).unwrap_or(Nanos::MAX))
    }

    /// The balance in whole units (rounded towards negative infinity).
    pub fn balance_units(&self) -> i128 {
        self.balance.div_euclid(i128::from(NANOS_PER_SECOND))
    }

    /// The same bucket at another rate and burst, keeping its balance (clamped
    /// to the new burst; a debt is kept whole, since units are units whatever
    /// the rate).
    fn resized(&self, now: Nanos, rate: u64, burst_ns: Nanos) -> Self {
        let mut old = *self;
        old.refill(now);
        // A `now` earlier than the last time seen counts as no time passed:
        // the balance stays dated at that time, so no interval is refilled
        // twice.
        let mut new = Self::new(old.updated_at, rate, burst_ns);
        new.balance = old.balance.min(new.capacity);
        new
    }
}

/// The buckets of one class's [`RateLimit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassLimiter {
    limit: RateLimit,
    bytes: Option<TokenBucket>,
    operations: Option<TokenBucket>,
}

impl ClassLimiter {
    /// Full buckets for `limit` (which must be valid) as of `now`.
    pub fn new(now: Nanos, limit: RateLimit) -> Self {
        debug_assert_eq!(limit.validate(), Ok(()));
        Self {
            limit,
            bytes: limit
                .bytes_per_s
                .map(|rate| TokenBucket::new(now, rate, limit.burst_ns)),
            operations: limit
                .iops
                .map(|rate| TokenBucket::new(now, rate, limit.burst_ns)),
        }
    }

    /// The limit these buckets enforce.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Changes the limit at `now`, keeping each bucket's balance (or debt)
    /// where the dimension stays capped; a newly capped dimension starts full.
    pub fn set_limit(&mut self, now: Nanos, limit: RateLimit) {
        debug_assert_eq!(limit.validate(), Ok(()));
        let resize = |bucket: Option<TokenBucket>, rate: Option<u64>| {
            rate.map(|rate| match bucket {
                Some(bucket) => bucket.resized(now, rate, limit.burst_ns),
                None => TokenBucket::new(now, rate, limit.burst_ns),
            })
        };
        self.bytes = resize(self.bytes, limit.bytes_per_s);
        self.operations = resize(self.operations, limit.iops);
        self.limit = limit;
    }

    /// Charges a piece of `bytes` at `now`, and one operation if it starts a
    /// request.
    pub fn charge(&mut self, now: Nanos, bytes: u64, starts_request: bool) {
        if let Some(bucket) = &mut self.bytes {
            bucket.take(now, bytes);
        }
        if starts_request {
            if let Some(bucket) = &mut self.operations {
                bucket.take(now, 1);
            }
        }
    }

    /// Whether every bucket is out of debt at `now`.
    pub fn is_eligible(&mut self, now: Nanos) -> bool {
        let bytes = self.bytes.as_mut().is_none_or(|b| b.is_eligible(now));
        let operations = self.operations.as_mut().is_none_or(|b| b.is_eligible(now));
        bytes && operations
    }

    /// When every bucket is out of debt.
    pub fn eligible_at(&self) -> Nanos {
        [self.bytes, self.operations]
            .into_iter()
            .flatten()
            .map(|bucket| bucket.eligible_at())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_spends_its_burst_then_waits_for_the_rate() {
        // 1000 units/s, 10 ms burst: 10 units at once.
        let mut bucket = TokenBucket::new(0, 1_000, 10_000_000);
        assert_eq!(bucket.balance_units(), 10);
        bucket.take(0, 10);
        assert!(bucket.is_eligible(0), "exactly zero is not a debt");
        bucket.take(0, 3);
        assert!(!bucket.is_eligible(0));
        // 3 units at 1000/s: 3 ms.
        assert_eq!(bucket.eligible_at(), 3_000_000);
        assert!(!bucket.is_eligible(2_999_999));
        assert!(bucket.is_eligible(3_000_000));
    }

    #[test]
    fn the_balance_never_exceeds_the_burst() {
        let mut bucket = TokenBucket::new(0, 1_000, 10_000_000);
        bucket.refill(NANOS_PER_SECOND * 100);
        assert_eq!(bucket.balance_units(), 10);
    }

    #[test]
    fn the_burst_holds_at_least_one_unit() {
        // 10 units/s for 1 ns would be a hundred-millionth of a unit.
        let bucket = TokenBucket::new(0, 10, 1);
        assert_eq!(bucket.balance_units(), 1);
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let mut bucket = TokenBucket::new(1_000, 1_000, 1_000_000);
        bucket.take(1_000, 5);
        let before = bucket;
        bucket.refill(10);
        assert_eq!(bucket, before);
    }

    #[test]
    fn a_new_limit_set_with_an_earlier_time_refills_nothing_twice() {
        let limit = RateLimit::bytes_per_s(1_000).with_burst_ns(10_000_000);
        let mut limiter = ClassLimiter::new(0, limit);
        // 10 bytes of burst, 1010 charged at 1 s: a debt of 1000 bytes, paid
        // at 1000 bytes/s by 2 s.
        limiter.charge(NANOS_PER_SECOND, 1_010, true);
        limiter.set_limit(0, limit);
        assert!(!limiter.is_eligible(NANOS_PER_SECOND));
        assert_eq!(limiter.eligible_at(), 2 * NANOS_PER_SECOND);
    }

    #[test]
    fn a_limiter_is_eligible_only_when_both_buckets_are() {
        let limit = RateLimit::bytes_per_s(1_000_000)
            .with_iops(100)
            .with_burst_ns(10_000_000);
        let mut limiter = ClassLimiter::new(0, limit);
        // 10 KB burst, 1 op burst.
        limiter.charge(0, 4096, true);
        assert!(limiter.is_eligible(0), "one op and 4 KB of the burst");
        limiter.charge(0, 4096, true);
        assert!(!limiter.is_eligible(0), "the op bucket owes one op: 10 ms");
        assert_eq!(limiter.eligible_at(), 10_000_000);
        // A piece continuing a request costs no operation.
        limiter.charge(10_000_000, 100_000, false);
        // Bytes: 10 KB + 10 ms × 1 MB/s − 108 KB ... owes about 98 KB: 98 ms.
        let at = limiter.eligible_at();
        assert!(at > 90_000_000 && at < 110_000_000, "{at}");
    }

    #[test]
    fn changing_the_limit_keeps_a_debt() {
        let mut limiter = ClassLimiter::new(0, RateLimit::bytes_per_s(1_000));
        limiter.charge(0, 1_020, true);
        // 20 bytes burst (20 ms of 1000/s): owes 1000 bytes.
        limiter.set_limit(0, RateLimit::bytes_per_s(100_000));
        assert_eq!(limiter.eligible_at(), 10_000_000, "1000 bytes at 100 kB/s");
        limiter.set_limit(0, RateLimit::iops(5));
        assert!(limiter.is_eligible(0), "bytes no longer capped");
    }

    #[test]
    fn invalid_limits_name_the_field() {
        let none = RateLimit {
            bytes_per_s: None,
            iops: None,
            burst_ns: DEFAULT_BURST_NS,
        };
        assert_eq!(none.validate(), Err(CoreError::NothingCapped));
        assert_eq!(
            RateLimit::iops(0).validate(),
            Err(CoreError::ZeroRate("iops"))
        );
        assert!(RateLimit::bytes_per_s(0)
            .validate()
            .unwrap_err()
            .to_string()
            .contains("bytes_per_s"));
        assert_eq!(
            RateLimit::iops(1).with_burst_ns(0).validate(),
            Err(CoreError::InvalidBurst(0))
        );
    }
}
