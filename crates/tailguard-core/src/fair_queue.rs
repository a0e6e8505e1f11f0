//! Weighted fair queueing by cost/shares, with bounded credit for waking classes.
//!
//! Each class has a FIFO of items and a *virtual time* `vtime`: the device time it
//! has been charged, divided by its shares. The class with the smallest `vtime`
//! among the backlogged ones sends its head item next, and is charged
//! `cost × SHARES_SCALE / shares` (start-time fair queueing, as in SFQ, Seastar's
//! `fair_queue` and io.cost). Two backlogged classes with shares 100 and 300
//! therefore receive device time in the ratio 1:3, whatever their request sizes,
//! because the cost is device time (see [`crate::profile`]).
//!
//! Backlogged classes sit in a binary heap keyed by `(vtime, class index)`. Only the
//! class just served changes its key, so a pop and a push per dispatch suffice and
//! the cost per request grows with log(classes). Ties go to the lower index, so the
//! order is deterministic.
//!
//! ## Waking from idle: bounded credit
//!
//! A class that was idle keeps its old `vtime`, which may lie far behind the others:
//! left alone it would then monopolise the device until it caught up ("hoarding").
//! When a class becomes backlogged its `vtime` is raised to at least
//! `virtual_now − credit × SHARES_SCALE / shares`, where `virtual_now` is the largest
//! key served so far. A waking class may thus run ahead of the backlogged ones by at
//! most `credit` nanoseconds of device time, never by what it saved while idle.
//! The credit is a configuration value in device time (the dispatcher uses one
//! budget's worth), unlike Seastar's fixed 5 ms `tau`, so it scales with the
//! device and the latency target.
//!
//! ## The bounded wait
//!
//! Let class *i* be backlogged with shares `s_i`, let the other classes have shares
//! `s_j`, let `c_max` be the largest cost of one item (one piece after splitting),
//! `credit` the wake credit, and `B` the in-flight budget. Between the moment class
//! *i* gets a new head item and the moment that item leaves the queue, another
//! class *j* can be served only while its key is at most *i*'s. *i*'s key is at
//! most one of its own charges above `virtual_now`, plus up to `credit` of its own
//! device time when *i* itself was last served ahead of the head (by a bypass, or
//! in a running slice, whose longest turn the dispatcher counts in `credit`), while
//! *j*'s is at most `credit` below `virtual_now`. So *j* is served at most
//! `(c_max + credit) × s_j / s_i + credit + c_max` of device time (the last
//! `c_max` for the item that crosses, and for ties). Before the head
//! item may go, the work in flight and everything served to the others must
//! complete. The work in flight is at most `B + n × c_max`, where `n` is the
//! number of classes with work in flight: the dispatcher's progress rule lets a
//! class with nothing in flight always send its head piece, even into a full
//! budget (see [`crate::budget`]). [`gap_bound_ns`] takes that bound as its
//! `budget_ns` argument ([`crate::Dispatcher::in_flight_bound_ns`] computes it)
//! and writes it `B` below; with a single class it is `max(B, c_max)`. With a device that delivers the profile's capacity (one nanosecond of
//! cost per nanosecond), the longest time a backlogged class goes without a
//! dispatch is
//!
//! ```text
//! gap_max(i) = max(B, c_max) + Σ_{j≠i} ( (c_max + credit) × s_j / s_i + c_max + 2 × credit )
//! ```
//!
//! and a request with `k` requests of its own class ahead of it waits at most
//! `(k + 1) × gap_max(i)`. [`gap_bound_ns`] computes it; the property tests in
//! `tests/properties.rs` check it on random classes, shares and request streams.
//! Worked example, seed 002 on the `sata-ssd` profile: two classes of equal shares,
//! `B` = 300 µs, `c_max` = 291 µs (a 128 KiB write), credit = `B`: the async class
//! waits at most 300 + (291 + 300) + 291 + 2 × 300 ≈ 1.8 ms between dispatches,
//! against CFQ's 15–30 s.
//!
//! ## Bypassing a head that must wait
//!
//! The dispatcher serves the head class only when its head item fits the
//! in-flight budget. When it does not (a large write piece into a budget
//! that reads and other writes fill), [`FairQueue::pop_bypassing`] serves
//! instead the next class in virtual-time order whose head item fits, if its
//! key is at most `credit × SHARES_SCALE / shares` above the waiting head's
//! (at most `credit` of its own device time ahead, the waking credit's
//! bound) and it is among the first [`BYPASS_SCAN_MAX`] classes. Without it a
//! 4 KiB read of a class far under its share waits behind a write that
//! waits for room, although the budget has room for the read: head-of-line
//! blocking that the budget does not ask for. The waiting head keeps its key
//! and is served first as soon as it fits. Between two of its dispatches,
//! each other class *j* is served by bypass at most `credit` of device time
//! more than it would be otherwise, which the bound below counts.
//!
//! ## Held classes: skipped without losing their place
//!
//! A class may be *held* ([`FairQueue::hold`]): the dispatcher holds a class
//! whose rate limit has no tokens (see [`crate::rate_limit`]). A held class
//! leaves the heap, so [`FairQueue::peek`] and [`FairQueue::pop`] skip it and
//! serve the next class by virtual time, while its items stay queued in order.
//! Its `vtime` is kept, so it loses no position it had earned; when it is
//! released ([`FairQueue::release`]) it re-enters the heap under the same rule
//! as a class waking from idle, at no less than `virtual_now − credit`: the
//! time it spent held is not banked as credit that would let it monopolise the
//! device afterwards. Items pushed to a held class wait with it.
//!
//! ## Paced charges
//!
//! A class may carry a *pace* ([`FairQueue::set_pace_per_mille`]): how many
//! nanoseconds of cost the device serves per nanosecond of its own time for
//! that class, in thousandths ([`PACE_UNIT`], the default, charges the cost
//! as it is). The class is then charged `cost / pace`: the device time the
//! item takes as the device showed it, not as the cost model guessed it. The
//! dispatcher sets a pace only on a disk, where the cost model's seek and
//! rotation are averages that a class's own pattern can beat or miss by
//! several times (see [`crate::pace`]); shares then split the disk's time.
//! The queued cost and the cost returned with an item stay unpaced (the
//! budget counts them). A paced class's charge is its device time only as
//! far as its pace is right, and the wait bound above holds in that time.
//!
//! Virtual times are `u64`. Long runs would eventually overflow them, so when
//! `virtual_now` passes [`REBASE_THRESHOLD`] every key is shifted down by the same
//! amount, which preserves all comparisons.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Charges are `cost × SHARES_SCALE / shares`: a class with the largest allowed
/// shares is charged exactly its cost, so no precision is lost at the top.
pub const SHARES_SCALE: u64 = 10_000;
/// The smallest shares a class may have.
pub const SHARES_MIN: u32 = 1;
/// The largest shares a class may have.
pub const SHARES_MAX: u32 = 10_000;
/// When `virtual_now` passes this, all virtual times are shifted down. At 2^62 a
/// class with 1 share charged 10 ms per request could take 4.6 × 10^7 requests
/// first, so rebases are rare; they cost one pass over the classes.
pub const REBASE_THRESHOLD: u64 = 1 << 62;
/// A pace of one ([`FairQueue::set_pace_per_mille`]): the class is charged
/// its cost.
pub const PACE_UNIT: u64 = 1_000;
/// The most classes [`FairQueue::pop_bypassing`] looks at past the head: it
/// bounds the cost of one dispatch whatever the number of classes.
pub const BYPASS_SCAN_MAX: usize = 8;

/// The longest time a backlogged class with `shares` waits between two
/// dispatches, next to classes with `other_shares`; see the module docs.
/// All durations are nanoseconds of device time at the profile's capacity.
pub fn gap_bound_ns(
    shares: u32,
    other_shares: &[u32],
    budget_ns: u64,
    max_cost_ns: u64,
    credit_ns: u64,
) -> u64 {
    let in_flight = budget_ns.max(max_cost_ns);
    let others: u64 = other_shares
        .iter()
        .map(|&share| {
            let lead_ns = max_cost_ns.saturating_add(credit_ns);
            let proportional = lead_ns.saturating_mul(u64::from(share)) / u64::from(shares.max(1));
            proportional
                .saturating_add(max_cost_ns)
                .saturating_add(credit_ns.saturating_mul(2))
        })
        .fold(0, u64::saturating_add);
    in_flight.saturating_add(others)
}

#[derive(Debug)]
struct ClassQueue<T> {
    shares: u32,
    vtime: u64,
    items: VecDeque<(u64, T)>,
    /// The summed cost of `items`.
    queued_ns: u64,
    /// Device time charged to this class since it was created.
    charged_ns: u64,
    /// Cost served per unit of device time, in [`PACE_UNIT`]s.
    pace_per_mille: u64,
    live: bool,
    /// Skipped by pop and peek until released; see the module docs.
    held: bool,
}

/// A weighted fair queue over classes; see the module docs.
#[derive(Debug)]
pub struct FairQueue<T> {
    classes: Vec<ClassQueue<T>>,
    backlogged: BinaryHeap<Reverse<(u64, usize)>>,
    virtual_now: u64,
    credit_ns: u64,
    len: usize,
    /// Keys taken off the heap while looking past the head (reused).
    skipped: Vec<Reverse<(u64, usize)>>,
}

/// `device_ns` of a class's own device time in virtual time: what it moves
/// the class's key, given its shares.
fn virtual_ns(device_ns: u64, shares: u32) -> u64 {
    device_ns.saturating_mul(SHARES_SCALE) / u64::from(shares)
}

impl<T> FairQueue<T> {
    /// An empty queue whose waking classes get `credit_ns` of device time ahead.
    pub fn new(credit_ns: u64) -> Self {
        Self {
            classes: Vec::new(),
            backlogged: BinaryHeap::new(),
            virtual_now: 0,
            credit_ns,
            len: 0,
            skipped: Vec::new(),
        }
    }

    /// Changes the wake credit (device time, nanoseconds).
    pub fn set_credit_ns(&mut self, credit_ns: u64) {
        self.credit_ns = credit_ns;
    }

    /// Adds a class at `index` (the caller's slot). A slot may be reused after
    /// [`FairQueue::remove_class`]. Shares must be in `SHARES_MIN..=SHARES_MAX`.
    pub fn add_class(&mut self, index: usize, shares: u32) {
        assert!(
            (SHARES_MIN..=SHARES_MAX).contains(&shares),
            "shares {shares}"
        );
        while self.classes.len() <= index {
            self.classes.push(ClassQueue {
                shares: SHARES_MIN,
                vtime: 0,
                items: VecDeque::new(),
                queued_ns: 0,
                charged_ns: 0,
                pace_per_mille: PACE_UNIT,
                live: false,
                held: false,
            });
        }
        let class = &mut self.classes[index];
        assert!(!class.live, "class slot {index} is in use");
        *class = ClassQueue {
            shares,
            vtime: self.virtual_now,
            items: VecDeque::new(),
            queued_ns: 0,
            charged_ns: 0,
            pace_per_mille: PACE_UNIT,
            live: true,
            held: false,
        };
    }

    /// Changes a class's shares. The class's lead or lag on `virtual_now` was
    /// accumulated in units of its old shares; it is rescaled so that it stays the
    /// same amount of *device time*. Without this, a class raised from 1 to 10000
    /// shares right after a dispatch would keep a lead worth 10000 of its new
    /// charges and wait seconds, far past the bound.
    pub fn set_shares(&mut self, index: usize, shares: u32) {
        assert!(
            (SHARES_MIN..=SHARES_MAX).contains(&shares),
            "shares {shares}"
        );
        let virtual_now = self.virtual_now;
        let class = &mut self.classes[index];
        assert!(class.live);
        let lead = i128::from(class.vtime) - i128::from(virtual_now);
        let rescaled = lead * i128::from(class.shares) / i128::from(shares);
        let vtime = (i128::from(virtual_now) + rescaled).clamp(0, i128::from(u64::MAX));
        class.vtime = vtime as u64;
        class.shares = shares;
        if !class.items.is_empty() && !class.held {
            self.backlogged
                .retain(|Reverse((_, queued))| *queued != index);
            self.backlogged
                .push(Reverse((self.classes[index].vtime, index)));
        }
    }

    /// Sets a class's pace: from its next dispatch it is charged
    /// `cost × PACE_UNIT / pace_per_mille` (see the module docs). A pace of
    /// 0 counts as one thousandth.
    pub fn set_pace_per_mille(&mut self, index: usize, pace_per_mille: u64) {
        self.classes[index].pace_per_mille = pace_per_mille.max(1);
    }

    /// A class's pace, in thousandths ([`PACE_UNIT`] unless set).
    pub fn pace_per_mille(&self, index: usize) -> u64 {
        self.classes[index].pace_per_mille
    }

    /// Removes an empty class.
    pub fn remove_class(&mut self, index: usize) {
        let class = &mut self.classes[index];
        assert!(class.live && class.items.is_empty(), "class {index} busy");
        class.live = false;
        class.held = false;
    }

    /// Holds a class: [`FairQueue::pop`] and [`FairQueue::peek`] skip it, its
    /// items and virtual time stay; see the module docs. Holding a held class
    /// does nothing.
    pub fn hold(&mut self, index: usize) {
        let class = &mut self.classes[index];
        debug_assert!(class.live, "hold of removed class {index}");
        if std::mem::replace(&mut class.held, true) || class.items.is_empty() {
            return;
        }
        self.backlogged
            .retain(|Reverse((_, queued))| *queued != index);
    }

    /// Releases a held class: with items queued it re-enters the order at its
    /// virtual time, raised to no less than `virtual_now − credit` (see the
    /// module docs). Releasing a class that is not held does nothing.
    pub fn release(&mut self, index: usize) {
        let class = &mut self.classes[index];
        if !std::mem::replace(&mut class.held, false) || class.items.is_empty() {
            return;
        }
        self.raise_to_credit(index);
        self.backlogged
            .push(Reverse((self.classes[index].vtime, index)));
    }

    /// Whether a class is held.
    pub fn is_held(&self, index: usize) -> bool {
        self.classes[index].held
    }

    /// Raises a class's virtual time to at least `virtual_now − credit`.
    fn raise_to_credit(&mut self, index: usize) {
        let class = &mut self.classes[index];
        let credit = virtual_ns(self.credit_ns, class.shares);
        class.vtime = class.vtime.max(self.virtual_now.saturating_sub(credit));
    }

    /// Appends an item of `cost_ns` to a class's FIFO.
    pub fn push(&mut self, index: usize, cost_ns: u64, item: T) {
        debug_assert!(self.classes[index].live, "push to removed class {index}");
        if self.classes[index].items.is_empty() && !self.classes[index].held {
            self.raise_to_credit(index);
            self.backlogged
                .push(Reverse((self.classes[index].vtime, index)));
        }
        let class = &mut self.classes[index];
        class.items.push_back((cost_ns, item));
        class.queued_ns += cost_ns;
        self.len += 1;
    }

    /// The class and cost of the item that [`FairQueue::pop`] would return.
    pub fn peek(&self) -> Option<(usize, u64)> {
        let Reverse((_, index)) = *self.backlogged.peek()?;
        let (cost, _) = self.classes[index].items.front()?;
        Some((index, *cost))
    }

    /// The class, cost and item that [`FairQueue::pop`] would return.
    pub fn peek_item(&self) -> Option<(usize, u64, &T)> {
        let Reverse((_, index)) = *self.backlogged.peek()?;
        let (cost, item) = self.classes[index].items.front()?;
        Some((index, *cost, item))
    }

    /// The next item of class `index`, whether or not the class is at the
    /// head.
    pub fn front_item(&self, index: usize) -> Option<&T> {
        self.classes[index].items.front().map(|(_, item)| item)
    }

    /// Replaces the head item of class `index` by the two items `split` makes
    /// of it, in that order (a piece cut in two). Nothing is charged: the class's
    /// place among the others depends on its virtual time, not on its head.
    pub fn split_front(
        &mut self,
        index: usize,
        split: impl FnOnce(u64, T) -> ((u64, T), (u64, T)),
    ) {
        let class = &mut self.classes[index];
        let (cost_ns, item) = class.items.pop_front().expect("split of an empty class");
        let (first, second) = split(cost_ns, item);
        class.queued_ns = class.queued_ns - cost_ns + first.0 + second.0;
        class.items.push_front(second);
        class.items.push_front(first);
        self.len += 1;
    }

    /// Removes the head item of the class with the smallest virtual time
    /// (held classes skipped) and charges the class for it. Returns the class, the cost and the item.
    pub fn pop(&mut self) -> Option<(usize, u64, T)> {
        let Reverse((key, index)) = self.backlogged.pop()?;
        Some(self.serve(key, index, key))
    }

    /// Removes and charges the head item of the first class after the head,
    /// in virtual-time order, that `may_bypass` accepts (given the class, its
    /// head item's cost and the cost it has queued) and whose key is at most
    /// its credit above the head's; see the module docs. `None` (nothing
    /// changed) when no class among the first [`BYPASS_SCAN_MAX`] qualifies.
    pub fn pop_bypassing(
        &mut self,
        may_bypass: impl FnMut(usize, u64, u64) -> bool,
    ) -> Option<(usize, u64, T)> {
        self.pop_after_head(self.credit_ns, may_bypass)
    }

    /// [`FairQueue::pop_bypassing`] with `lead_ns` in place of the queue's
    /// wake credit: a class up to `lead_ns` of its own device time above the
    /// head may go (the dispatcher's latency classes beside a running slice,
    /// which may lead by the whole slice plus the credit).
    pub fn pop_bypassing_within(
        &mut self,
        lead_ns: u64,
        may_bypass: impl FnMut(usize, u64, u64) -> bool,
    ) -> Option<(usize, u64, T)> {
        self.pop_after_head(lead_ns, may_bypass)
    }

    /// Removes and charges the head item of class `index`, served out of
    /// virtual-time order, if it is backlogged, not the head, and its key is
    /// at most `lead_ns` of its own device time above the head's: the
    /// dispatcher's slice on a rotational device (see [`crate::dispatcher`]).
    /// `None` (nothing changed) otherwise.
    pub fn pop_class_within(&mut self, index: usize, lead_ns: u64) -> Option<(usize, u64, T)> {
        self.pop_after_head(lead_ns, |candidate, _, _| candidate == index)
    }

    /// Whether class `index` is not held and its virtual time is at most
    /// `lead_ns` of its own device time above the head's (whether or not it
    /// has items now).
    pub fn is_within_lead(&self, index: usize, lead_ns: u64) -> bool {
        let Some(&Reverse((head_key, _))) = self.backlogged.peek() else {
            return false;
        };
        let class = &self.classes[index];
        let lead = virtual_ns(lead_ns, class.shares);
        class.live && !class.held && class.vtime <= head_key.saturating_add(lead)
    }

    /// The cost of class `index`'s head item, if it has one.
    pub fn front_cost_ns(&self, index: usize) -> Option<u64> {
        self.classes[index]
            .items
            .front()
            .map(|(cost_ns, _)| *cost_ns)
    }

    /// The scan behind [`FairQueue::pop_bypassing`] and
    /// [`FairQueue::pop_class_within`]: the first class after the head,
    /// among [`BYPASS_SCAN_MAX`], that `may_bypass` accepts and whose key is
    /// at most `lead_ns` of its own device time above the head's.
    fn pop_after_head(
        &mut self,
        lead_ns: u64,
        mut may_bypass: impl FnMut(usize, u64, u64) -> bool,
    ) -> Option<(usize, u64, T)> {
        if self.backlogged.len() < 2 {
            return None;
        }
        let head = self.backlogged.pop()?;
        let Reverse((head_key, _)) = head;
        self.skipped.push(head);
        let mut found = None;
        while self.skipped.len() <= BYPASS_SCAN_MAX {
            let Some(&Reverse((key, index))) = self.backlogged.peek() else {
                break;
            };
            let class = &self.classes[index];
            let lead = virtual_ns(lead_ns, class.shares);
            let (cost_ns, _) = class.items.front().expect("backlogged class is empty");
            if key <= head_key.saturating_add(lead) && may_bypass(index, *cost_ns, class.queued_ns)
            {
                found = self.backlogged.pop();
                break;
            }
            self.skipped.push(self.backlogged.pop().expect("peeked"));
        }
        self.backlogged.extend(self.skipped.drain(..));
        let Reverse((key, index)) = found?;
        // Served out of order: `virtual_now` advances only to the head's
        // key, so classes waking later are not pushed behind the bypass.
        Some(self.serve(key, index, head_key))
    }

    /// Charges class `index`, just taken off the heap with `key`, for its
    /// head item, and puts it back if it has more; `virtual_now` advances to
    /// at least `served_key`.
    fn serve(&mut self, key: u64, index: usize, served_key: u64) -> (usize, u64, T) {
        let class = &mut self.classes[index];
        let (cost_ns, item) = class.items.pop_front().expect("backlogged class is empty");
        class.queued_ns -= cost_ns;
        debug_assert_eq!(key, class.vtime);
        self.virtual_now = self.virtual_now.max(served_key);
        let paced_ns =
            u128::from(cost_ns) * u128::from(PACE_UNIT) / u128::from(class.pace_per_mille);
        let paced_ns = u64::try_from(paced_ns).unwrap_or(u64::MAX);
        class.vtime = key.saturating_add(virtual_ns(paced_ns, class.shares));
        class.charged_ns += cost_ns;
        if !class.items.is_empty() {
            self.backlogged.push(Reverse((class.vtime, index)));
        }
        self.len -= 1;
        if self.virtual_now > REBASE_THRESHOLD {
            self.rebase(self.virtual_now / 2);
        }
        (index, cost_ns, item)
    }

    /// Shifts every virtual time down by `amount`, keeping all comparisons.
    fn rebase(&mut self, amount: u64) {
        self.virtual_now -= amount;
        for class in &mut self.classes {
            class.vtime = class.vtime.saturating_sub(amount);
        }
        let keys = self
            .backlogged
            .drain()
            .map(|Reverse((_, index))| Reverse((self.classes[index].vtime, index)))
            .collect::<Vec<_>>();
        self.backlogged.extend(keys);
    }

    /// Items queued over all classes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items queued in one class.
    pub fn class_len(&self, index: usize) -> usize {
        self.classes[index].items.len()
    }

    /// The summed cost of a class's queued items.
    pub fn queued_ns(&self, index: usize) -> u64 {
        self.classes[index].queued_ns
    }

    /// Device time charged to the class since it was created.
    pub fn charged_ns(&self, index: usize) -> u64 {
        self.classes[index].charged_ns
    }

    /// A class's shares.
    pub fn shares(&self, index: usize) -> u32 {
        self.classes[index].shares
    }

    /// Removes every item of a class (for cancellation), oldest first.
    pub fn drain_class(&mut self, index: usize) -> Vec<T> {
        let class = &mut self.classes[index];
        let drained: Vec<T> = class.items.drain(..).map(|(_, item)| item).collect();
        class.queued_ns = 0;
        self.len -= drained.len();
        self.backlogged
            .retain(|Reverse((_, queued))| *queued != index);
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `rounds` items from always-backlogged classes and returns the
    /// device time each received.
    fn serve_backlogged(shares: &[u32], costs: &[u64], rounds: usize) -> Vec<u64> {
        let mut queue = FairQueue::new(1_000);
        for (index, &share) in shares.iter().enumerate() {
            queue.add_class(index, share);
            queue.push(index, costs[index], ());
        }
        let mut received = vec![0; shares.len()];
        for _ in 0..rounds {
            let (index, cost, ()) = queue.pop().unwrap();
            received[index] += cost;
            queue.push(index, costs[index], ());
        }
        received
    }

    #[test]
    fn device_time_follows_shares_whatever_the_request_sizes() {
        // Expect 1:3 in device time although class 1's requests cost 20x more.
        let received = serve_backlogged(&[100, 300], &[1_000, 20_000], 20_000);
        let ratio = received[1] as f64 / received[0] as f64;
        assert!((ratio - 3.0).abs() < 0.05, "ratio {ratio}");
    }

    #[test]
    fn a_waking_class_gets_at_most_its_credit() {
        let credit_ns = 50_000;
        let mut queue = FairQueue::new(credit_ns);
        queue.add_class(0, 100);
        queue.add_class(1, 100);
        // Class 0 runs alone for a long time; class 1 is idle.
        for _ in 0..1_000 {
            queue.push(0, 10_000, ());
            queue.pop().unwrap();
        }
        // Class 1 wakes with a deep backlog; class 0 stays backlogged.
        for _ in 0..100 {
            queue.push(1, 10_000, ());
        }
        queue.push(0, 10_000, ());
        let mut class_one_ahead_ns = 0;
        while let Some((index, cost, ())) = queue.pop() {
            if index == 0 {
                break;
            }
            class_one_ahead_ns += cost;
        }
        // Expect at most credit + one item (ties) served before class 0 again.
        assert!(
            class_one_ahead_ns <= credit_ns + 10_000,
            "{class_one_ahead_ns}"
        );
        assert!(
            class_one_ahead_ns >= credit_ns - 10_000,
            "{class_one_ahead_ns}"
        );
    }

    #[test]
    fn rebase_keeps_the_order() {
        let mut queue = FairQueue::new(0);
        queue.add_class(0, 1);
        queue.add_class(1, 2);
        queue.push(0, 7, 'a');
        queue.push(1, 7, 'b');
        queue.classes[0].vtime += 1_000;
        queue.classes[1].vtime += 1_001;
        queue.virtual_now = 900;
        let before = queue.classes[1].vtime - queue.classes[0].vtime;
        queue.rebase(500);
        assert_eq!(queue.classes[1].vtime - queue.classes[0].vtime, before);
        assert_eq!(queue.virtual_now, 400);
    }

    #[test]
    fn drain_class_removes_only_that_class() {
        let mut queue = FairQueue::new(0);
        queue.add_class(0, 1);
        queue.add_class(1, 1);
        queue.push(0, 1, 1);
        queue.push(1, 1, 2);
        queue.push(1, 1, 3);
        assert_eq!(queue.drain_class(1), vec![2, 3]);
        assert_eq!(queue.len(), 1);
        assert_eq!(
            queue.pop().map(|(index, _, item)| (index, item)),
            Some((0, 1))
        );
        assert!(queue.pop().is_none());
    }

    /// Serves every class's items on a serial server (each item takes its cost)
    /// and returns the dispatch times of class `watched`'s items.
    fn serve_serially(queue: &mut FairQueue<()>, watched: usize) -> Vec<u64> {
        let (mut now, mut times) = (0, Vec::new());
        while let Some((index, cost, ())) = queue.pop() {
            if index == watched {
                times.push(now);
            }
            now += cost;
        }
        times
    }

    #[test]
    fn raising_shares_does_not_leave_a_lead_in_old_units() {
        // Class 0 (1 share) is served once, then raised to 10000 shares beside a
        // class 1 with 10000 shares and a deep backlog. Expect class 0's second
        // item within the gap bound, not after class 1's whole backlog.
        let cost = 291_000;
        let mut queue = FairQueue::new(300_000);
        queue.add_class(0, 1);
        queue.add_class(1, 10_000);
        queue.push(0, cost, ());
        queue.push(0, cost, ());
        for _ in 0..400 {
            queue.push(1, cost, ());
        }
        assert_eq!(queue.pop().map(|(index, ..)| index), Some(0));
        queue.set_shares(0, 10_000);
        let times = serve_serially(&mut queue, 0);
        let bound = gap_bound_ns(10_000, &[10_000], 300_000, cost, 300_000);
        assert!(
            times[0] <= bound,
            "waited {} ns, bound {bound} ns",
            times[0]
        );
    }

    #[test]
    fn lowering_shares_keeps_the_lead_in_device_time() {
        // A class one item ahead at 100 shares is still one item of device time
        // ahead at 10 shares: its lead in virtual time grows tenfold.
        let mut queue = FairQueue::new(0);
        queue.add_class(0, 100);
        queue.push(0, 1_000, ());
        queue.pop();
        let lead_before = queue.classes[0].vtime - queue.virtual_now;
        queue.set_shares(0, 10);
        let lead_after = queue.classes[0].vtime - queue.virtual_now;
        assert_eq!(lead_before * 100, lead_after * 10);
    }

    #[test]
    fn a_held_class_is_skipped_and_keeps_its_items_in_order() {
        let mut queue = FairQueue::new(0);
        queue.add_class(0, 100);
        queue.add_class(1, 100);
        queue.push(0, 10, 'a');
        queue.push(0, 10, 'b');
        queue.hold(0);
        queue.push(0, 10, 'c');
        queue.push(1, 10, 'x');
        assert_eq!(queue.peek(), Some((1, 10)), "class 0 is skipped");
        assert_eq!(
            queue.pop().map(|(index, _, item)| (index, item)),
            Some((1, 'x'))
        );
        assert!(queue.pop().is_none(), "only held work is left");
        assert_eq!(queue.len(), 3);
        queue.release(0);
        let items: Vec<char> =
            std::iter::from_fn(|| queue.pop().map(|(_, _, item)| item)).collect();
        assert_eq!(items, ['a', 'b', 'c']);
    }

    #[test]
    fn a_released_class_banks_no_more_than_the_credit() {
        // Class 0 is held while class 1 is served for a long time; once
        // released, class 0 goes ahead by at most the credit (plus one item),
        // as a class waking from idle would.
        let credit_ns = 50_000;
        let mut queue = FairQueue::new(credit_ns);
        queue.add_class(0, 100);
        queue.add_class(1, 100);
        for _ in 0..100 {
            queue.push(0, 10_000, ());
        }
        queue.hold(0);
        for _ in 0..1_000 {
            queue.push(1, 10_000, ());
            assert_eq!(queue.pop().map(|(index, ..)| index), Some(1));
        }
        queue.push(1, 10_000, ());
        queue.release(0);
        let mut ahead_ns = 0;
        while let Some((index, cost, ())) = queue.pop() {
            if index == 1 {
                break;
            }
            ahead_ns += cost;
        }
        // Class 1 was just served, so its key is one item past virtual_now:
        // credit, that item, and one for the tie.
        assert!(ahead_ns <= credit_ns + 2 * 10_000, "{ahead_ns}");
        assert!(ahead_ns >= credit_ns, "{ahead_ns}");
    }

    #[test]
    fn a_held_class_keeps_a_lead_it_had() {
        // Class 0 is ahead (served more) when it is held: released at once,
        // it is still behind class 1 in the order, not reset to the front.
        let mut queue = FairQueue::new(0);
        queue.add_class(0, 100);
        queue.add_class(1, 100);
        queue.push(0, 50_000, ());
        queue.push(0, 10, ());
        queue.push(1, 10, ());
        assert_eq!(queue.pop().map(|(index, ..)| index), Some(0));
        queue.hold(0);
        queue.release(0);
        assert_eq!(queue.peek().map(|(index, _)| index), Some(1));
    }

    #[test]
    fn gap_bound_matches_the_worked_example() {
        let bound = gap_bound_ns(100, &[100], 300_000, 291_000, 300_000);
        assert_eq!(bound, 300_000 + (291_000 + 300_000) + 291_000 + 2 * 300_000);
        // The lead a class may take counts in proportion to the shares.
        let uneven = gap_bound_ns(100, &[10_000], 300_000, 291_000, 300_000);
        assert_eq!(
            uneven,
            300_000 + (291_000 + 300_000) * 100 + 291_000 + 2 * 300_000
        );
    }

    /// A write head (class 0) that does not fit; reads (class 1) that do.
    fn write_head_and_reads(credit_ns: u64) -> FairQueue<&'static str> {
        let mut queue = FairQueue::new(credit_ns);
        queue.add_class(0, 100);
        queue.add_class(1, 400);
        queue.push(0, 262_000, "write");
        queue.push(1, 10_000, "read");
        queue.push(1, 10_000, "read");
        queue
    }

    #[test]
    fn a_piece_that_fits_bypasses_a_head_that_waits_and_the_head_keeps_its_place() {
        let mut queue = write_head_and_reads(1_000_000);
        assert_eq!(
            queue.peek(),
            Some((0, 262_000)),
            "the write is the head (tie, lower index)"
        );
        let fits = |_: usize, cost_ns: u64, _: u64| cost_ns <= 100_000;
        assert_eq!(queue.pop_bypassing(fits).map(|(index, ..)| index), Some(1));
        assert_eq!(queue.peek(), Some((0, 262_000)), "the write is still first");
        assert_eq!(queue.pop_bypassing(fits).map(|(index, ..)| index), Some(1));
        assert!(
            queue.pop_bypassing(fits).is_none(),
            "only the write is left"
        );
        assert_eq!(queue.pop().map(|(_, _, item)| item), Some("write"));
    }

    #[test]
    fn a_class_more_than_its_credit_ahead_does_not_bypass() {
        let mut queue = write_head_and_reads(0);
        let fits = |_: usize, cost_ns: u64, _: u64| cost_ns <= 100_000;
        // The first read's key ties the head's: within a zero credit.
        assert_eq!(queue.pop_bypassing(fits).map(|(index, ..)| index), Some(1));
        // The second is one read's charge ahead: beyond it.
        assert!(queue.pop_bypassing(fits).is_none());
        assert_eq!(queue.len(), 2, "nothing was taken");
        assert_eq!(queue.peek(), Some((0, 262_000)));
    }

    #[test]
    fn bypassing_looks_at_a_bounded_number_of_classes() {
        let mut queue = FairQueue::new(u64::MAX / SHARES_SCALE);
        for index in 0..=BYPASS_SCAN_MAX + 1 {
            queue.add_class(index, 100);
            queue.push(index, 1_000 + index as u64, ());
        }
        let last = BYPASS_SCAN_MAX + 1;
        let mut looked = Vec::new();
        let popped = queue.pop_bypassing(|index, _, _| {
            looked.push(index);
            index == last
        });
        assert!(popped.is_none(), "the last class is past the scan");
        assert_eq!(looked.len(), BYPASS_SCAN_MAX);
        assert_eq!(queue.len(), BYPASS_SCAN_MAX + 2, "nothing was taken");
        assert_eq!(queue.peek().map(|(index, _)| index), Some(0));
    }
}
