//! The adaptive latency controller: the smallest budget that sustains throughput.
//!
//! [`AdaptiveBudget`] resizes a device's in-flight budget from completions
//! alone. It cuts time into *windows* (at least
//! [`ControllerConfig::window_min_ns`] and
//! [`ControllerConfig::window_completions`] completions, at most
//! [`ControllerConfig::window_max_ns`]) and at the end of each measures the
//! **rate** at which the device completes cost (cost-ns per ns: 1.0 when the
//! profile is exact and the device busy), the **queueing delay** the budget
//! causes by Little's law (mean in-flight cost ÷ rate), and the **late reads**.
//! [`AdaptiveBudget::classify`] names the window's [`Situation`] by the rules
//! below, in this order, and one match acts on it. Every number the rules use
//! is a field of [`ControllerConfig`]; the *goal* is
//! [`ControllerConfig::goal_fraction`] of the latency target.
//!
//! 1. **Protected reads.** A read is one of the window's reads only if its
//!    class was not *backlogged* when it was dispatched
//!    ([`CompletionSample::class_backlogged`]): a class is backlogged when a
//!    budget of its own work waits behind the piece, or when some does while
//!    the class already holds half its shares' part of the budget or more. A
//!    class asking for more than it gets waits for itself more than for
//!    anyone else, and a smaller budget would only slow it down. Such a read
//!    is *late* when its device time
//!    (dispatch to completion) exceeds the target and it would have been on
//!    time without the other classes' work ahead of it, drained at the
//!    window's rate ([`CompletionSample::ahead_other_ns`]); a read over the
//!    target with little such work ahead is the device's floor, which no
//!    budget changes. Time waited in the fair queue never makes a read late:
//!    it says the budget is full, not that it is too large.
//! 2. **Congestion.** A window is congested when more than
//!    [`ControllerConfig::late_reads_per_hundred`] in a hundred of its reads are
//!    late, or, while *Little's law judges* (no read of any class completed
//!    within [`ControllerConfig::reads_remembered_ns`], and no writer is
//!    alone: rule 5), when the Little's-law delay exceeds the goal
//!    (what a read arriving now would wait at a first-come-first-served
//!    device). The budget is cut at once to what drains within the goal (by
//!    Little's law, and by the worst late read), by a factor between
//!    [`ControllerConfig::congestion_cut_min`] and
//!    [`ControllerConfig::congestion_cut_max`]; a budget the workload did not
//!    fill is cut from what was in flight, not from itself, so a later burst
//!    cannot fill it. The budget cut to becomes the *congestion threshold*.
//! 3. **Stalls say nothing about depth.** A window in which more than
//!    [`ControllerConfig::stall_fraction`] passed between two completions is
//!    judged for congestion only: no probe starts from it or is judged by it.
//! 4. **Slow start.** With a guessed profile ([`DeviceProfile::uncalibrated`])
//!    the budget starts at its minimum
//!    ([`LatencyController::start_limit_ns`]) and doubles every window in which
//!    it held work back, until the first congestion or until a doubling would
//!    take the Little's-law delay over the goal: small budgets split pieces
//!    small, and a step that does not change the split size pays nothing
//!    although a larger one would. Until slow start ends, a Little's-law delay
//!    over the goal without recent reads is congestion even for a writer alone
//!    (rule 5), so a read arriving later does not find the overshoot ahead.
//! 5. **Saturating classes alone: throughput alone.** While no piece of a
//!    class that is not backlogged (rule 1) completed within
//!    [`ControllerConfig::alone_after_ns`] (counted from the first
//!    completion) that was a read or found another class's work ahead of it
//!    ([`CompletionSample::ahead_other_ns`]), every class asks for more than
//!    it gets, no one can be made late or short of its shares, and the
//!    budget's goal is throughput (a *writer alone*, or several saturating
//!    classes): growth probes double, and one starts, and is judged by rules 7
//!    and 8, only on the rate and in-flight cost averaged over at least
//!    [`ControllerConfig::knee_completions`] and
//!    [`ControllerConfig::knee_min_ns`] since the budget last changed (one
//!    window of a seeking disk swings by more than the knee test's margin, and
//!    a write cache shows the old pieces' cost until it drained them),
//!    counted once the pieces queued at the change (split for the old budget)
//!    have completed. A probe that raised that rate by
//!    [`ControllerConfig::growth_hints`] but not by
//!    [`ControllerConfig::growth_pays`] grows on once before its verdict (a
//!    larger budget splits larger pieces, whose gain may show only at the next
//!    split size), and a wasted verdict after that falls back to the budget
//!    whose rate rose by the hint, not below it (below it the rate was
//!    lower). Little's law does not judge, the congestion threshold does
//!    not bound growth, and the budget never probes downwards. A
//!    read that arrives later finds at most the knee's worth of work ahead, and
//!    its first late window cuts the budget (rule 2). Otherwise each window is
//!    judged by itself.
//! 6. **Growth probes.** When the budget held work back and there is room (the
//!    window has recent reads, none of them late; a writer is alone; or one
//!    more step keeps the Little's-law delay within the goal), it grows by
//!    [`ControllerConfig::grow_step`], and by
//!    [`ControllerConfig::grow_step_fast`] once growth paid twice in a row.
//!    Above the congestion threshold each step adds only
//!    [`ControllerConfig::grow_step`] of the threshold, until
//!    [`ControllerConfig::threshold_paid_windows`] paid windows in a row forget
//!    it.
//! 7. **The knee test.** A growth probe is judged once it changed the mean
//!    in-flight cost by [`ControllerConfig::in_flight_grew`] (pieces come in
//!    whole sizes; until then it grows on from the same baseline). It is kept
//!    if the rate rose by [`ControllerConfig::growth_pays`] and undone
//!    otherwise, so the budget settles where more depth stops buying
//!    throughput.
//! 8. **Reads pay for no growth.** A growth probe in whose window more reads
//!    missed the target, for any reason, than the share before it predicts (by
//!    more than one, and more than
//!    [`ControllerConfig::late_reads_per_hundred`] in a hundred) is undone
//!    whatever the rate: the per-read test of rule 1 trusts the window's rate
//!    to say how long the work ahead took, which a bursty device belies.
//! 9. **Failed growth backs off.** A growth probe during which a window
//!    congested delays the next one by [`ControllerConfig::grow_backoff_ns`],
//!    doubling with each failure up to [`ControllerConfig::grow_backoff_max_ns`],
//!    until the threshold is forgotten.
//! 10. **Shrink probes only while Little's law judges** (or rule 14 asks for
//!     one). After a wasted growth
//!     the next probe goes down by [`ControllerConfig::shrink_step`] and is
//!     kept while the rate stays within [`ControllerConfig::shrink_keeps`] of
//!     the rate before the first step; probes are
//!     [`ControllerConfig::hold_windows`] apart, and none starts from the
//!     first window (its rate counts the time the device took to fill, so a
//!     shrink judged against it looks free). A shrink probe never takes the
//!     budget below [`ControllerConfig::shrink_floor_pieces`] pieces, and after
//!     a costly one none starts for [`ControllerConfig::shrink_backoff_ns`],
//!     doubling up to [`ControllerConfig::shrink_backoff_max_ns`]. While reads
//!     judge, the budget only probes upwards: a smaller budget buys reads
//!     nothing once they meet the target, and a write cache hides a smaller
//!     budget's cost for longer than a window.
//! 11. **Starving devices.** A read late and overtaken by more than
//!     [`ControllerConfig::starved_overtaken_factor`] budgets of newer work
//!     ([`CompletionSample::overtaken_ns`]) shows a device that reorders its
//!     queue and starves old pieces (a disk's shortest-seek-first queue behind
//!     a stream). For [`ControllerConfig::starvation_memory_ns`] (renewed by
//!     every read still overtaken) pieces become overdue
//!     ([`LatencyController::overdue_after_ns`]): a read as soon as it is the
//!     oldest in flight, a write after
//!     [`ControllerConfig::overdue_write_factor`] times its expected time, and
//!     the dispatcher feeds the device nothing newer until the piece is served.
//!     Before starvation is seen, a read is overdue after
//!     [`ControllerConfig::read_overdue_targets`] targets, a watchdog so that
//!     the first starved read is served at all. Neither applies to a read of a
//!     backlogged class (the dispatcher's choice): it is served after its own
//!     class's queue anyway; nor to a read dispatched while no other class had
//!     work in flight, until another class's piece is dispatched after it
//!     (then it is overdue as if dispatched at that moment): until then only
//!     its own class's work overtakes it, which holding back newer work would
//!     not help.
//! 12. **Stalling devices hold two pieces.** For
//!     [`ControllerConfig::stall_memory_ns`] after a stalled window whose
//!     stall was at most [`ControllerConfig::pipeline_stall_targets`] targets
//!     long, the budget holds at most [`PIPELINE_PIECES`] pieces of the size it
//!     splits to, and a growth step that cap would take back goes instead to
//!     the smallest budget that splits larger pieces. A read behind a stall
//!     waits for the stall and then for every piece queued behind it, and a
//!     device that serves one command at a time gains nothing from a queue:
//!     only larger pieces can pay there, and the knee test judges them.
//! 13. **Bounds.** The budget stays between four of the most expensive 4 KiB
//!     requests (so the device always pipelines; see [`crate::budget`]) and
//!     [`ControllerConfig::limit_max_targets`] latency targets
//!     ([`BudgetBounds`]).
//! 14. **Shares need a queue.** The fair queue splits the device by shares
//!     only among pieces that wait in it. While two or more classes each
//!     have more than [`ControllerConfig::shared_queue_pieces`] pieces in
//!     flight at most of a window's completions
//!     ([`CompletionSample::runner_up_in_flight_pieces`]) and the budget held
//!     nothing back, the window starts a shrink probe (rule 10, judged by the rate alone, whether or
//!     not reads are recent, with a floor of the window's pieces): a device
//!     queue that deep is split by the device, not by shares, and a smaller
//!     budget that keeps the rate costs no one anything. Once the budget
//!     binds, the classes that asked for more than they get are backlogged
//!     (rule 1) and the knee test judges it.
//!
//! So one saturating class alone, or several saturating classes together, are
//! judged by throughput (the knee test) and not held at a latency no one asked
//! for, while a light latency class beside a bulk one is protected. Reads of
//! every class still count as recent reads, so Little's law judges the budget
//! only when no read happens at all, and only while a class that is not
//! backlogged shares the device.
//!
//! ## What inspired it, and how it differs
//!
//! blk-wbt (CoDel-like) watches the *minimum* read latency in windows and
//! shrinks the write depth when even the fastest read misses the target; kyber
//! keeps a token pool per domain (reads, writes) and shrinks a domain's depth
//! when a latency percentile of another exceeds its target. Both only know
//! latency, so they cannot tell a deep queue that buys throughput (a disk's
//! elevator, an SSD's parallel units) from one that only adds delay; a fixed
//! sub-millisecond goal (Seastar's) starves disks for the same reason. Here the
//! budget is device time, so Little's law turns the measured rate into a
//! predicted delay for any budget, and the knee test grows the queue only
//! while it pays in throughput. Further differences:
//!
//! - **Reads are judged one by one, against the work ahead of them.** Like
//!   wbt's minimum, this ignores the device's floor; unlike a minimum, it still
//!   sees a tail made by queueing (the 1% that matters for a p99 target).
//! - **Reads are not throttled behind stalled writes.** kyber's per-domain
//!   pools become the dispatcher's progress rule (a class with nothing in
//!   flight may always send one piece), which works for any number of classes.
//! - **No profile needed.** Rates are measured in the profile's cost units, so
//!   a wrong profile only scales them: a device three times slower than
//!   believed shows a rate of 0.33 and gets a budget three times smaller in
//!   cost, the same in real time. A profile only makes the first window closer.
//!
//! Every decision is counted in [`ControllerStats`] (grows, shrinks, holds,
//! congested windows) and the last one is kept whole as a [`Decision`] (its
//! situation, the budget before and after, the rate and delay measured), which
//! the dispatcher reports in its stats so an engine can trace each one.

use crate::budget::{split_bytes, Budget, PIPELINE_PIECES};
use crate::profile::{CostModel, DeviceProfile};
use crate::quiet_reads::QuietReads;
use crate::request::{Direction, Nanos, NANOS_PER_MILLISECOND, NANOS_PER_SECOND};

/// One completed piece, as a latency controller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionSample {
    /// When it completed.
    pub now: Nanos,
    /// Read or write.
    pub direction: Direction,
    /// Its cost.
    pub cost_ns: Nanos,
    /// From dispatch to completion: the device's time, including its own queue.
    pub device_time_ns: Nanos,
    /// From enqueue to dispatch: the time spent in the fair queue.
    pub queue_wait_ns: Nanos,
    /// Cost in flight just before this completion was released.
    pub in_flight_ns: Nanos,
    /// Cost that was in flight when this piece was dispatched: the work queued
    /// at the device ahead of it.
    pub ahead_ns: Nanos,
    /// The part of `ahead_ns` that other classes had in flight: the work ahead
    /// of it that the budget could have kept back for it. The rest was its own
    /// class's, which no budget can take away without taking it from the class.
    pub ahead_other_ns: Nanos,
    /// Whether its class was backlogged when it was dispatched: a budget of
    /// its own work waited in the fair queue, or some did while the class held
    /// half its shares' part of the budget or more. The class asks for more
    /// than it gets, so its latency is its own queue's, and the latency target
    /// is not its promise (see [`crate::controller`], rule 1).
    pub class_backlogged: bool,
    /// Pieces waiting in the fair queue for the budget at this completion
    /// (those of classes held by their rate limit do not count): nonzero
    /// means the budget, not the workload, was what held work back.
    pub queued_pieces: usize,
    /// The second largest number of pieces any class has in flight at this
    /// completion (0 with fewer than two classes in flight): two or more
    /// classes have at least this many pieces in the device's queue, where
    /// the fair queue's shares do not reach.
    pub runner_up_in_flight_pieces: usize,
    /// Cost of pieces dispatched *after* this one that completed before it (a
    /// lower bound: completions since its dispatch, less `ahead_ns`). Large on a
    /// device that reorders its queue and starves an old piece (a disk serving
    /// the shortest seek first); near zero on a first-come-first-served one.
    pub overtaken_ns: Nanos,
}

/// Resizes a device's budget from what completions show. Pure: it sees time only
/// through the samples.
pub trait LatencyController: Send {
    /// Called for every completed piece with the current limit; returns a new
    /// limit, or `None` to keep it.
    fn on_completion(&mut self, sample: &CompletionSample, limit_ns: Nanos) -> Option<Nanos>;

    /// What the controller decided so far (all zero for one that never decides).
    fn stats(&self) -> ControllerStats {
        ControllerStats::default()
    }

    /// How long after its dispatch a piece of `direction`, dispatched now with
    /// `ahead_ns` of cost in flight before it and costing `cost_ns`, counts as
    /// *overdue*; `None` (the default) never calls a piece overdue. While the
    /// oldest piece in flight is overdue, the dispatcher lets only classes with
    /// nothing in flight dispatch: a device that reorders its queue (a disk
    /// serving the shortest seek first) then runs out of newer work and serves
    /// the piece it was starving.
    fn overdue_after_ns(
        &self,
        direction: Direction,
        ahead_ns: Nanos,
        cost_ns: Nanos,
    ) -> Option<Nanos> {
        let _ = (direction, ahead_ns, cost_ns);
        None
    }

    /// The limit a dispatcher starts from, given the one derived from its
    /// profile (the default keeps it). A controller that distrusts the profile
    /// (an uncalibrated guess) may start smaller and grow, as TCP's slow start
    /// does: work dispatched before the first completion cannot be recalled.
    fn start_limit_ns(&self, derived_ns: Nanos) -> Nanos {
        derived_ns
    }
}

impl<T: LatencyController + ?Sized> LatencyController for Box<T> {
    fn on_completion(&mut self, sample: &CompletionSample, limit_ns: Nanos) -> Option<Nanos> {
        (**self).on_completion(sample, limit_ns)
    }

    fn stats(&self) -> ControllerStats {
        (**self).stats()
    }

    fn overdue_after_ns(
        &self,
        direction: Direction,
        ahead_ns: Nanos,
        cost_ns: Nanos,
    ) -> Option<Nanos> {
        (**self).overdue_after_ns(direction, ahead_ns, cost_ns)
    }

    fn start_limit_ns(&self, derived_ns: Nanos) -> Nanos {
        (**self).start_limit_ns(derived_ns)
    }
}

/// A controller that never changes the budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedBudget;

impl LatencyController for FixedBudget {
    fn on_completion(&mut self, _sample: &CompletionSample, _limit_ns: Nanos) -> Option<Nanos> {
        None
    }
}

/// Which policy sizes a device's in-flight budget: the one list of them that
/// the engine, the simulator and the command line share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ControllerChoice {
    /// [`FixedBudget`]: the budget the profile and latency target derive.
    Fixed,
    /// [`AdaptiveBudget`]: resized online from what completions show.
    Adaptive,
}

impl ControllerChoice {
    /// Every choice, in the order the command line lists them.
    pub const ALL: [Self; 2] = [Self::Fixed, Self::Adaptive];

    /// The choice's name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Adaptive => "adaptive",
        }
    }

    /// The controller for a device with `profile`, with the default tunables.
    pub fn build(self, profile: &DeviceProfile) -> Box<dyn LatencyController> {
        self.build_with(profile, ControllerConfig::default())
    }

    /// The controller for a device with `profile`, with these tunables (which
    /// [`ControllerChoice::Fixed`] has no use for).
    pub fn build_with(
        self,
        profile: &DeviceProfile,
        config: ControllerConfig,
    ) -> Box<dyn LatencyController> {
        match self {
            Self::Fixed => Box::new(FixedBudget),
            Self::Adaptive => Box::new(AdaptiveBudget::for_profile_with(profile, config)),
        }
    }

    /// The quiet-reads rule a dispatcher with this controller takes, given
    /// the `rule` asked for: the fixed budget takes it; the adaptive
    /// controller grows its budget itself while no one reads, so it takes
    /// none. The engine and the simulator both ask here, so they apply the
    /// same rule to the same controller.
    pub fn quiet_reads(self, rule: Option<QuietReads>) -> Option<QuietReads> {
        match self {
            Self::Fixed => rule,
            Self::Adaptive => None,
        }
    }

    /// Whether a dispatcher with this controller spares latency classes
    /// their own work in flight (`DispatcherConfig::spare_latency_classes`):
    /// the fixed budget does, so a light reader never waits in the fair
    /// queue for room its own reads took; the adaptive controller sizes its
    /// budget from what the reads in it see, so it counts them. The engine
    /// and the simulator both ask here.
    pub fn spares_latency_classes(self) -> bool {
        match self {
            Self::Fixed => true,
            Self::Adaptive => false,
        }
    }

    /// How many pieces of the split size one budget holds while reads come
    /// (`DispatcherConfig::pipeline_pieces`) on a device that `seeks` or
    /// not and serves its commands `through_a_file` (a loop device) or not:
    /// the fixed budget takes one on a device through a file that does not
    /// seek, fewer and larger pieces (see "The split size follows the budget"
    /// in [`crate::budget`]), and [`PIPELINE_PIECES`] elsewhere, since a
    /// device that seeks needs the next piece queued; the adaptive
    /// controller's knee search sizes its budget for [`PIPELINE_PIECES`]
    /// always.
    pub fn pipeline_pieces(self, seeks: bool, through_a_file: bool) -> u64 {
        match self {
            Self::Fixed if through_a_file && !seeks => 1,
            _ => PIPELINE_PIECES,
        }
    }
}

impl std::fmt::Display for ControllerChoice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

impl std::str::FromStr for ControllerChoice {
    type Err = String;

    /// Parses a name; the error lists the names there are.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|choice| choice.name() == name)
            .ok_or_else(|| format!("unknown controller {name:?}: use fixed or adaptive"))
    }
}

/// The adaptive controller's tunables: every number its rules use, with the
/// trade-off each one sets. [`ControllerConfig::default`] is what the engine,
/// the simulator and the command line use; a scenario may override any field.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// Shortest window: longer averages over more completions of a fast
    /// device, shorter reacts to a slowdown sooner.
    pub window_min_ns: Nanos,
    /// Longest window: a slow device is judged at least this often, at the
    /// price of fewer completions to average over.
    pub window_max_ns: Nanos,
    /// Completions a window waits for (within the two bounds above): more keeps
    /// the rate's counting error well under the knee test's margins, fewer
    /// decides sooner.
    pub window_completions: u64,
    /// A window in which more than this fraction passed between two
    /// completions holds a device stall, which is judged for congestion but
    /// neither starts nor judges a probe: lower ignores more windows, higher
    /// lets a stall pass for a probe's verdict.
    pub stall_fraction: f64,
    /// A growth probe is kept only if the rate rose by this factor: higher
    /// settles at a shallower queue (less delay, maybe less throughput), lower
    /// lets noise buy depth.
    pub growth_pays: f64,
    /// While classes are alone (rule 5), a growth probe whose averaged rate rose by this
    /// factor, but by less than `growth_pays`, grows on once more before its
    /// verdict: a larger budget splits larger pieces, whose gain may show only
    /// at the next split size; lower follows smaller gains further.
    pub growth_hints: f64,
    /// A growth probe is judged only once the mean in-flight cost rose by this
    /// factor, since a larger budget holding the same whole pieces tells
    /// nothing: higher probes further before judging.
    pub in_flight_grew: f64,
    /// A shrink probe is kept only if the rate stayed at this fraction of the
    /// rate before it; stricter than `growth_pays` so alternating probes cannot
    /// walk the budget down a throughput slope.
    pub shrink_keeps: f64,
    /// First step of a growth probe: large enough for a gain over
    /// `growth_pays` to show below the knee, small enough not to overshoot it.
    pub grow_step: f64,
    /// Step once growth paid twice in a row (slow start): larger recovers a far
    /// too small budget in fewer windows, and overshoots further.
    pub grow_step_fast: f64,
    /// Paid growth windows in a row above the congestion threshold after which
    /// it is forgotten: more trusts a noisy rate less, fewer follows a device
    /// that sped up sooner.
    pub threshold_paid_windows: u32,
    /// A shrink probe multiplies the budget by this (the inverse of `grow_step`).
    pub shrink_step: f64,
    /// The deepest cut one congested window makes, as a factor: lower matches a
    /// sudden slowdown in fewer windows, higher forgives a noisy window more.
    pub congestion_cut_max: f64,
    /// The shallowest cut a congested window makes, as a factor, even if the
    /// estimate says less.
    pub congestion_cut_min: f64,
    /// Windows held between probes once the knee is found: each probe costs a
    /// little throughput or latency, more holds find a moved knee later.
    pub hold_windows: u32,
    /// After a costly shrink probe no shrink probe starts for this long,
    /// doubling with each costly one: on a disk a broken stream costs more than
    /// its window, so a confirmed knee is probed rarely.
    pub shrink_backoff_ns: Nanos,
    /// The longest wait between shrink probes after costly ones.
    pub shrink_backoff_max_ns: Nanos,
    /// After a growth probe during which a window congested, no growth probe
    /// starts for this long, doubling with each failure until the threshold is
    /// forgotten: each failed probe costs the reads a window.
    pub grow_backoff_ns: Nanos,
    /// The longest wait between growth probes after failed ones: longer costs
    /// the reads less, shorter finds a device that sped up sooner.
    pub grow_backoff_max_ns: Nanos,
    /// A shrink probe never takes the budget below this many pieces (of the
    /// split size it would set, and of the window's mean piece): with fewer, a
    /// disk loses its sequential stream whenever a completion is answered late.
    pub shrink_floor_pieces: f64,
    /// The goal for queueing delay, as a fraction of the latency target: a read
    /// waits for the work ahead (at most the goal) and for about one piece to
    /// make room (half of it), so two thirds keep the sum within the target.
    pub goal_fraction: f64,
    /// More than this many late reads in a hundred make a window congested:
    /// the target is a p99.
    pub late_reads_per_hundred: u64,
    /// Reads judge the budget while one completed within this long; after
    /// that, Little's law speaks for the reads that may come (or, for a writer
    /// alone, throughput does).
    pub reads_remembered_ns: Nanos,
    /// How long the evidence of a starving device keeps the overdue rule on
    /// (renewed by every read still overtaken): longer protects reads longer
    /// after the device last starved one, at the price of a shallower stream.
    pub starvation_memory_ns: Nanos,
    /// A late read overtaken by more than this many budgets of newer work was
    /// starved by the device's own reordering: devices that serve in parallel
    /// let a read be overtaken by a few pieces, a disk's shortest-seek-first
    /// queue by many.
    pub starved_overtaken_factor: u64,
    /// Before starvation is seen, a read still in flight after this many
    /// latency targets is overdue (a watchdog, so that the first starved read
    /// is served at all and can turn the starvation rule on).
    pub read_overdue_targets: u64,
    /// While the overdue rule is on, a write is overdue after this many times
    /// its expected device time (the work ahead and its own cost at the
    /// measured rate).
    pub overdue_write_factor: f64,
    /// The largest budget, in latency targets: a device far faster than its
    /// profile says shows a rate well above 1, and the budget follows, up to
    /// this.
    pub limit_max_targets: u64,
    /// How long a stalled window keeps the pipeline-pieces rule on (renewed by
    /// each): several of a stalling device's stall intervals.
    pub stall_memory_ns: Nanos,
    /// Only stalls up to this many latency targets long turn the
    /// pipeline-pieces rule on: behind a longer stall, the work queued after
    /// it is a small part of a read's wait, while the throughput the rule costs
    /// stays.
    pub pipeline_stall_targets: u64,
    /// While classes are alone (module docs, rule 5), a growth probe is judged (and started) only
    /// on the rate averaged over at least this many completions since the
    /// budget last changed: more beats a noisy device's window-to-window swings,
    /// fewer reaches the knee sooner.
    pub knee_completions: u64,
    /// While classes are alone, a growth probe is also judged (and started)
    /// only once its span lasted this long: a device's write cache goes on
    /// showing the cost of the pieces it holds, split for the old budget,
    /// until it has drained them; longer sees through a larger cache, shorter
    /// reaches the knee sooner.
    pub knee_min_ns: Nanos,
    /// Saturating classes count as alone (module docs, rule 5) once no read,
    /// and no piece that found another class's work ahead of it, of a class
    /// that is not backlogged completed for this long: longer keeps a sparse
    /// reader protected through longer pauses, shorter lets a writer left
    /// alone deepen its queue sooner.
    pub alone_after_ns: Nanos,
    /// While two or more classes each have more than this many pieces in
    /// flight and the budget holds nothing back, shrink probes start (rule
    /// 14): the fair queue splits the device by shares only among pieces
    /// that wait in it, so a deep device queue of several classes is split by
    /// the device instead; higher leaves more classes with many small
    /// requests (a pool of latency readers) to the device's split, lower
    /// probes shallow queues where a shrink may cost throughput.
    pub shared_queue_pieces: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            window_min_ns: 10 * NANOS_PER_MILLISECOND,
            window_max_ns: 200 * NANOS_PER_MILLISECOND,
            window_completions: 64,
            stall_fraction: 0.5,
            growth_pays: 1.05,
            growth_hints: 1.02,
            in_flight_grew: 1.1,
            shrink_keeps: 0.98,
            grow_step: 1.25,
            grow_step_fast: 2.0,
            threshold_paid_windows: 4,
            shrink_step: 0.8,
            congestion_cut_max: 0.25,
            congestion_cut_min: 0.9,
            hold_windows: 4,
            shrink_backoff_ns: 2 * NANOS_PER_SECOND,
            shrink_backoff_max_ns: 64 * NANOS_PER_SECOND,
            grow_backoff_ns: 100 * NANOS_PER_MILLISECOND,
            grow_backoff_max_ns: 3_200 * NANOS_PER_MILLISECOND,
            shrink_floor_pieces: 3.0,
            goal_fraction: 2.0 / 3.0,
            late_reads_per_hundred: 1,
            reads_remembered_ns: NANOS_PER_SECOND,
            starvation_memory_ns: 5 * NANOS_PER_SECOND,
            starved_overtaken_factor: 8,
            read_overdue_targets: 2,
            overdue_write_factor: 8.0,
            limit_max_targets: 64,
            stall_memory_ns: 10 * NANOS_PER_SECOND,
            pipeline_stall_targets: 2,
            knee_completions: 128,
            knee_min_ns: 400 * NANOS_PER_MILLISECOND,
            alone_after_ns: NANOS_PER_SECOND,
            shared_queue_pieces: 32,
        }
    }
}

/// What the classifier says about the window that just ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Situation {
    /// Too little happened, the workload did not fill the budget, or the device
    /// stalled for most of the window: nothing to learn.
    Idle,
    /// Reads late because of the work ahead, or (without reads) delay over the
    /// goal: shrink to what drains in time.
    Congested,
    /// A growth probe raised the rate by at least [`ControllerConfig::growth_pays`]: keep it, grow again.
    GrowthPaid,
    /// A growth probe did not change what was in flight: grow further before judging.
    GrowthUnfelt,
    /// A growth probe did not pay, or reads paid for it: undo it.
    GrowthWasted,
    /// A shrink probe kept the rate: keep it, shrink again.
    ShrinkFree,
    /// A shrink probe cost throughput: undo it.
    ShrinkCostly,
    /// The budget held work back and the goal leaves room: probe upwards.
    Underused,
    /// At the knee (or at the goal): probe downwards for a smaller budget.
    Settled,
    /// Between probes: hold.
    Fine,
    /// Starting small (no trusted profile) and no congestion seen yet: double,
    /// whether or not the last doubling paid. Small budgets split pieces small,
    /// and a step that does not change the split size pays nothing although a
    /// larger one would; so, as TCP's slow start, doubling ends only at the first
    /// congestion (late reads, or Little's-law delay over the goal), from where
    /// the knee search takes over.
    SlowStart,
}

impl Situation {
    /// A short lowercase name, for traces and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Congested => "congested",
            Self::GrowthPaid => "growth_paid",
            Self::GrowthUnfelt => "growth_unfelt",
            Self::GrowthWasted => "growth_wasted",
            Self::ShrinkFree => "shrink_free",
            Self::ShrinkCostly => "shrink_costly",
            Self::Underused => "underused",
            Self::Settled => "settled",
            Self::Fine => "fine",
            Self::SlowStart => "slow_start",
        }
    }
}

/// One decision, whole: what the window measured and what the budget became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// When the window ended (the completion that closed it).
    pub at_ns: Nanos,
    /// How the window was classified.
    pub situation: Situation,
    /// The budget before the decision.
    pub budget_before_ns: Nanos,
    /// The budget after it (equal when the decision was to hold).
    pub budget_after_ns: Nanos,
    /// The window's rate, in thousandths of cost-ns per ns.
    pub rate_milli: u64,
    /// The window's Little's-law queueing delay, ns (`u64::MAX` when nothing
    /// completed cost).
    pub delay_ns: Nanos,
    /// Reads completed in the window.
    pub reads: u64,
    /// Of those, reads late because of the work ahead of them.
    pub late_reads: u64,
    /// Reads over the target for any reason: the late ones, and those the
    /// per-read test put on the device's floor.
    pub over_target_reads: u64,
}

/// Counters of a controller's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControllerStats {
    /// Windows judged (one decision each).
    pub windows: u64,
    /// Times the budget grew (probes up, and undone shrink probes).
    pub grows: u64,
    /// Times the budget shrank (congestion, probes down, undone growth).
    pub shrinks: u64,
    /// Windows that left the budget as it was.
    pub holds: u64,
    /// Congested windows (a subset of the shrinks).
    pub congested: u64,
    /// The last window's classification.
    pub last: Option<Situation>,
    /// The last window's rate, in thousandths of cost-ns per ns (1000: the device
    /// completes exactly what its profile predicts).
    pub rate_milli: u64,
    /// The last decision, whole; `windows` tells a reader whether it is new.
    pub last_decision: Option<Decision>,
    /// Reads that showed the device starving them: late, and overtaken by more
    /// than a whole budget of newer work.
    pub starved_reads: u64,
    /// Whether the overdue rule is on (starvation seen within
    /// [`ControllerConfig::starvation_memory_ns`]).
    pub starving: bool,
    /// The budget the last congestion cut to, above which growth is additive
    /// (`None`: no congestion yet, or forgotten after
    /// [`ControllerConfig::threshold_paid_windows`] paid windows above it).
    pub threshold_ns: Option<Nanos>,
    /// Growth steps held to one additive step by the threshold (a doubling, or
    /// a step larger than the threshold's, that was not taken).
    pub additive_grows: u64,
    /// How long growth probes will wait after the next failed one (0 before
    /// the first failure; see [`ControllerConfig::grow_backoff_ns`]).
    pub grow_backoff_ns: Nanos,
    /// Whether the pipeline-pieces rule is on (a stalled window seen within
    /// [`ControllerConfig::stall_memory_ns`]).
    pub stalls: bool,
}

/// How an [`AdaptiveBudget`] is bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetBounds {
    /// The latency target (what the profile asks for).
    pub latency_target_ns: Nanos,
    /// The smallest budget: four of the most expensive 4 KiB requests, so the
    /// device always pipelines (see [`crate::budget`]).
    pub min_limit_ns: Nanos,
    /// The largest budget: [`ControllerConfig::limit_max_targets`] latency targets.
    pub max_limit_ns: Nanos,
}

impl BudgetBounds {
    /// Bounds for a profile under `config`.
    pub fn for_profile(profile: &DeviceProfile, config: &ControllerConfig) -> Self {
        let min_limit_ns =
            Budget::derived_limit_ns(0, CostModel::new(profile).small_request_cost_ns());
        let target = profile.latency_target_ns();
        Self {
            latency_target_ns: target,
            min_limit_ns,
            max_limit_ns: config
                .limit_max_targets
                .saturating_mul(target)
                .max(min_limit_ns),
        }
    }
}

/// What one window measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowSummary {
    /// Completions in the window.
    pub completions: u64,
    /// Cost completed per nanosecond.
    pub rate: f64,
    /// Mean in-flight cost, ns.
    pub mean_in_flight_ns: f64,
    /// Little's law: mean in-flight cost ÷ rate, in ns.
    pub delay_ns: f64,
    /// Mean cost of the pieces completed, ns.
    pub mean_piece_cost_ns: f64,
    /// Whether pieces waited in the fair queue at most completions.
    pub binding: bool,
    /// Whether two or more classes each had more than
    /// [`ControllerConfig::shared_queue_pieces`] pieces in flight at most
    /// completions (rule 14).
    pub shared: bool,
    /// Whether the device stalled: more than [`ControllerConfig::stall_fraction`] of the window
    /// passed between two completions (or before the first).
    pub stalled: bool,
    /// The longest time between two completions (or before the first), ns.
    pub longest_gap_ns: Nanos,
    /// Reads completed.
    pub reads: u64,
    /// Whether a read completed within [`ControllerConfig::reads_remembered_ns`] of the window's end.
    pub reads_recent: bool,
    /// Reads late because of the work ahead of them.
    pub late_reads: u64,
    /// The longest device time of those late reads, in ns (0 when none).
    pub worst_late_read_ns: Nanos,
    /// Reads over the target, whatever the cause (the late ones, and those the
    /// per-read test puts on the device's floor).
    pub over_target_reads: u64,
    /// Whether the budget's goal is throughput alone (module docs, rule 5): no
    /// read, and no piece with another class's work ahead, of a class that was
    /// not backlogged completed within [`ControllerConfig::alone_after_ns`].
    pub unprotected: bool,
    /// Completions since the budget last changed, this window's included.
    pub span_completions: u64,
    /// The rate since the budget last changed.
    pub span_rate: f64,
    /// The mean in-flight cost since the budget last changed, ns.
    pub span_mean_in_flight_ns: f64,
    /// How long the span of `span_completions` lasted, ns.
    pub span_ns: Nanos,
}

impl WindowSummary {
    /// The share of the window's reads that missed the target, for any reason
    /// (0 without reads).
    pub fn missed_share(&self) -> f64 {
        if self.reads == 0 {
            return 0.0;
        }
        self.over_target_reads as f64 / self.reads as f64
    }
}

#[derive(Clone, Debug, Default)]
struct Window {
    start_ns: Nanos,
    completions: u64,
    cost_ns: u128,
    in_flight_sum_ns: u128,
    backlogged: u64,
    reads: u64,
    /// The last completion's time, and the longest gap between completions.
    last_completion_ns: Nanos,
    longest_gap_ns: Nanos,
    /// (device time, work ahead) of reads whose device time alone was over
    /// the target; judged at the window's end, when the rate is known.
    late_candidates: Vec<(Nanos, Nanos)>,
    /// Reads over the target, fair-queue wait included.
    over_target_reads: u64,
    /// Pieces waiting in the fair queue at the last completion.
    queued_pieces: u64,
    /// Completions at which two or more classes each had more than
    /// [`ControllerConfig::shared_queue_pieces`] pieces in flight.
    shared: u64,
}

/// What completed since the budget last changed.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    /// Completions still to pass before the span counts: the pieces queued
    /// when the budget changed, split for the old budget.
    skip: u64,
    start_ns: Nanos,
    completions: u64,
    cost_ns: u128,
    in_flight_sum_ns: u128,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Probe {
    None,
    Up {
        from_ns: Nanos,
        baseline: f64,
        baseline_in_flight_ns: f64,
        /// The share of reads that missed the target before the probe.
        baseline_missed: f64,
        /// Whether it already grew on from a rate that rose by less than
        /// [`ControllerConfig::growth_pays`] (rule 5).
        hinted: bool,
        /// The budget at which the rate rose by
        /// [`ControllerConfig::growth_hints`] (rule 5), if it grew on from
        /// there: a wasted verdict falls back to it, not below.
        hinted_ns: Option<Nanos>,
    },
    Down {
        from_ns: Nanos,
        baseline: f64,
        /// Started for the sake of shares (rule 14): its floor counts the
        /// window's pieces only.
        for_shares: bool,
    },
}

/// The adaptive controller; see the module docs.
#[derive(Clone, Debug)]
pub struct AdaptiveBudget {
    bounds: BudgetBounds,
    config: ControllerConfig,
    window: Window,
    started: bool,
    probe: Probe,
    paid_streak: u32,
    probe_down_next: bool,
    holds_left: u32,
    last_read_ns: Option<Nanos>,
    /// The last completion that found another class's work ahead of it.
    last_shared_ns: Option<Nanos>,
    /// What completed since the budget last changed, before this window.
    span: Span,
    last: WindowSummary,
    stats: ControllerStats,
    /// Start from the smallest budget (the profile is a guess).
    start_small: bool,
    /// How long shrink probes wait after the next costly one (doubles each time).
    shrink_backoff_ns: Nanos,
    /// No shrink probe before then (see [`ControllerConfig::shrink_backoff_ns`]).
    shrink_not_before_ns: Nanos,
    /// How long growth probes wait after the next failed one (doubles each time).
    grow_backoff_ns: Nanos,
    /// No growth probe starts before then (see [`ControllerConfig::grow_backoff_ns`]).
    grow_not_before_ns: Nanos,
    /// Doubling every window until the first congestion (see [`Situation::SlowStart`]).
    slow_start: bool,
    /// The overdue rule is on until then (see [`ControllerConfig::starvation_memory_ns`]).
    starving_until_ns: Option<Nanos>,
    /// Where the last congestion cut the budget to (TCP's ssthresh); see
    /// [`AdaptiveBudget::congestion_threshold_ns`].
    threshold_ns: Option<Nanos>,
    /// Paid growth windows in a row above the threshold.
    paid_above_threshold: u32,
    /// The last completion's time.
    now_ns: Nanos,
    /// The device stalls until then (see [`ControllerConfig::stall_memory_ns`]).
    stalls_until_ns: Option<Nanos>,
    /// How the dispatcher prices and splits pieces, when built from a profile
    /// (see [`ControllerConfig::shrink_floor_pieces`]).
    pieces: Option<(CostModel, u64)>,
}

impl AdaptiveBudget {
    /// A controller with these bounds and the default tunables.
    pub fn new(bounds: BudgetBounds) -> Self {
        Self::with_config(bounds, ControllerConfig::default())
    }

    /// A controller with these bounds and tunables.
    pub fn with_config(bounds: BudgetBounds, config: ControllerConfig) -> Self {
        Self {
            bounds,
            config,
            window: Window::default(),
            started: false,
            probe: Probe::None,
            paid_streak: 0,
            probe_down_next: false,
            holds_left: 0,
            last_read_ns: None,
            last_shared_ns: None,
            span: Span::default(),
            last: WindowSummary::default(),
            stats: ControllerStats::default(),
            start_small: false,
            shrink_backoff_ns: config.shrink_backoff_ns,
            shrink_not_before_ns: 0,
            grow_backoff_ns: config.grow_backoff_ns,
            grow_not_before_ns: 0,
            slow_start: false,
            starving_until_ns: None,
            threshold_ns: None,
            paid_above_threshold: 0,
            now_ns: 0,
            stalls_until_ns: None,
            pieces: None,
        }
    }

    /// A controller for a profile ([`BudgetBounds::for_profile`]) with the
    /// default tunables.
    pub fn for_profile(profile: &DeviceProfile) -> Self {
        Self::for_profile_with(profile, ControllerConfig::default())
    }

    /// A controller for a profile ([`BudgetBounds::for_profile`]) with these
    /// tunables. For [`DeviceProfile::uncalibrated`]'s guess it starts small
    /// ([`AdaptiveBudget::starting_small`]).
    pub fn for_profile_with(profile: &DeviceProfile, config: ControllerConfig) -> Self {
        let guess =
            DeviceProfile::uncalibrated(profile.max_request_bytes, profile.latency_target_us);
        let bounds = BudgetBounds::for_profile(profile, &config);
        let mut controller = Self::with_config(bounds, config).starting_small(*profile == guess);
        controller.pieces = Some((CostModel::new(profile), profile.max_request_bytes));
        controller
    }

    /// The cost of the largest piece the dispatcher splits to at `limit_ns`
    /// (the more expensive direction), when the profile is known.
    fn split_piece_cost_ns(&self, limit_ns: Nanos) -> Nanos {
        let Some((cost_model, max_request_bytes)) = self.pieces else {
            return 0;
        };
        [Direction::Read, Direction::Write]
            .into_iter()
            .map(|direction| {
                let cost = |bytes| cost_model.cost_ns(direction, bytes);
                cost(split_bytes(limit_ns, max_request_bytes, cost))
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether the dispatcher starts from the smallest budget and grows (slow
    /// start) instead of the budget its profile derives. Right when the profile is
    /// a guess: a guess that overrates the device lets the first burst queue
    /// seconds of work before the first completion can say so.
    pub fn starting_small(mut self, start_small: bool) -> Self {
        self.start_small = start_small;
        self.slow_start = start_small;
        self
    }

    /// Its bounds.
    pub fn config(&self) -> &BudgetBounds {
        &self.bounds
    }

    /// Its tunables.
    pub fn tunables(&self) -> &ControllerConfig {
        &self.config
    }

    /// The goal for queueing delay; see [`ControllerConfig::goal_fraction`].
    pub fn goal_ns(&self) -> f64 {
        self.bounds.latency_target_ns as f64 * self.config.goal_fraction
    }

    /// The last window's summary.
    pub fn last_window(&self) -> &WindowSummary {
        &self.last
    }

    /// The congestion threshold, like TCP's slow-start threshold: the budget
    /// the last congested window cut to. Below it growth steps as usual
    /// (doubling once growth paid twice, but not past it); above it each step
    /// adds [`ControllerConfig::grow_step`] less one of the threshold and never
    /// doubles, until [`ControllerConfig::threshold_paid_windows`] paid windows
    /// in a row forget it: a noisy rate can judge a window paid by chance, and
    /// doubling on such a verdict runs past the depth that congested.
    pub fn congestion_threshold_ns(&self) -> Option<Nanos> {
        self.threshold_ns
    }

    /// Bounds a growth step from `limit_ns` to `grown` by the congestion
    /// threshold, and counts the steps it held back.
    fn bound_by_threshold(&mut self, limit_ns: Nanos, grown: f64) -> f64 {
        let Some(threshold_ns) = self.threshold_ns else {
            return grown;
        };
        let limit = limit_ns as f64;
        let threshold = threshold_ns as f64;
        let bounded = if limit >= threshold {
            grown.min(limit + threshold * (self.config.grow_step - 1.0))
        } else {
            grown.min(threshold.max(limit * self.config.grow_step))
        };
        if bounded < grown {
            self.stats.additive_grows += 1;
        }
        bounded
    }

    /// Counts a paid growth window above the threshold, and forgets the
    /// threshold after [`ControllerConfig::threshold_paid_windows`] in a row.
    fn note_paid_above_threshold(&mut self, situation: Situation, limit_ns: Nanos) {
        let Some(threshold_ns) = self.threshold_ns else {
            return;
        };
        if situation != Situation::GrowthPaid || limit_ns <= threshold_ns {
            // An unfelt step or a stalled window says nothing either way.
            if !matches!(situation, Situation::GrowthUnfelt | Situation::Idle) {
                self.paid_above_threshold = 0;
            }
            return;
        }
        self.paid_above_threshold += 1;
        if self.paid_above_threshold >= self.config.threshold_paid_windows {
            self.threshold_ns = None;
            self.paid_above_threshold = 0;
            self.grow_backoff_ns = self.config.grow_backoff_ns;
        }
    }

    fn window_done(&self, now: Nanos) -> bool {
        let elapsed = now.saturating_sub(self.window.start_ns);
        (elapsed >= self.config.window_min_ns
            && self.window.completions >= self.config.window_completions)
            || elapsed >= self.config.window_max_ns
    }

    fn summarize(&self, now: Nanos) -> WindowSummary {
        let window = &self.window;
        let elapsed = now.saturating_sub(window.start_ns).max(1) as f64;
        let rate = window.cost_ns as f64 / elapsed;
        let mean_in_flight_ns = window.in_flight_sum_ns as f64 / window.completions.max(1) as f64;
        let delay_ns = if rate > 0.0 {
            mean_in_flight_ns / rate
        } else {
            f64::INFINITY
        };
        let target = self.bounds.latency_target_ns as f64;
        // Late because of queueing: over the target, and on time without the work
        // ahead (drained at the measured rate). Otherwise it is the device's floor.
        let late = window
            .late_candidates
            .iter()
            .filter(|(latency_ns, ahead_ns)| {
                rate > 0.0 && *latency_ns as f64 - *ahead_ns as f64 / rate <= target
            })
            .map(|(device_ns, _)| *device_ns);
        let (late_reads, worst_late_read_ns) = late.fold((0, 0), |(count, worst), device_ns| {
            (count + 1, Nanos::max(worst, device_ns))
        });
        let within = |at: Option<Nanos>, memory_ns: Nanos| {
            at.is_some_and(|at| now.saturating_sub(at) <= memory_ns)
        };
        let alone_after_ns = self.config.alone_after_ns;
        // Until the pieces queued at the change have passed, nothing is measured.
        let span_completions = if self.span.skip >= window.completions {
            0
        } else {
            self.span.completions + window.completions
        };
        let span_start_ns = if self.span.completions == 0 {
            window.start_ns
        } else {
            self.span.start_ns
        };
        let span_elapsed = now.saturating_sub(span_start_ns).max(1) as f64;
        WindowSummary {
            completions: window.completions,
            rate,
            mean_in_flight_ns,
            delay_ns,
            mean_piece_cost_ns: window.cost_ns as f64 / window.completions.max(1) as f64,
            binding: window.backlogged * 2 >= window.completions && window.completions > 0,
            shared: window.shared * 2 >= window.completions && window.completions > 0,
            stalled: window.longest_gap_ns as f64 > self.config.stall_fraction * elapsed,
            longest_gap_ns: window.longest_gap_ns,
            reads: window.reads,
            reads_recent: within(self.last_read_ns, self.config.reads_remembered_ns),
            late_reads,
            worst_late_read_ns,
            over_target_reads: window.over_target_reads,
            unprotected: !within(self.last_shared_ns, alone_after_ns),
            span_completions,
            span_rate: (self.span.cost_ns + window.cost_ns) as f64 / span_elapsed,
            span_mean_in_flight_ns: (self.span.in_flight_sum_ns + window.in_flight_sum_ns) as f64
                / span_completions.max(1) as f64,
            span_ns: now.saturating_sub(span_start_ns),
        }
    }

    /// Names the situation after a window; pure in the window and the probe state.
    pub fn classify(&self, window: &WindowSummary, limit_ns: Nanos) -> Situation {
        if window.completions == 0 || window.rate <= 0.0 {
            return Situation::Idle;
        }
        let goal = self.goal_ns();
        let late = window.late_reads > 0
            && window.late_reads * 100 > window.reads * self.config.late_reads_per_hundred;
        // A writer alone is judged by throughput (rule 5), but not while slow
        // start may still overshoot: a read arriving later must not find the
        // overshoot ahead of it.
        let littles_law_judges = !window.unprotected || self.slow_start;
        let delay_over = !window.reads_recent && littles_law_judges && window.delay_ns > goal;
        // Congestion even when the budget held nothing back: a budget far above
        // what the workload keeps in flight (a wrong profile, a slow device) must
        // come down to what is in flight and below, or the next burst fills it.
        if late || delay_over {
            return Situation::Congested;
        }
        // A stall says nothing about depth: its rate would condemn a growth probe
        // that did not cause it, or pass one judged against it.
        if window.stalled {
            return Situation::Idle;
        }
        if self.slow_start {
            if !window.binding {
                return Situation::Idle;
            }
            if limit_ns < self.bounds.max_limit_ns
                && window.delay_ns * self.config.grow_step_fast <= goal
            {
                return Situation::SlowStart;
            }
        }
        if window.unprotected {
            return self.classify_for_throughput(window, limit_ns);
        }
        self.judge_probe(window, limit_ns)
            .unwrap_or_else(|| self.classify_between_probes(window, limit_ns))
    }

    /// The verdict on the probe under way, judged by this window alone (rules
    /// 7, 8 and 10); `None` without a probe.
    fn judge_probe(&self, window: &WindowSummary, limit_ns: Nanos) -> Option<Situation> {
        let situation = match self.probe {
            Probe::Up {
                baseline,
                baseline_in_flight_ns,
                baseline_missed,
                ..
            } => {
                if !window.binding
                    || reads_paid(window, baseline_missed, self.config.late_reads_per_hundred)
                {
                    Situation::GrowthWasted
                } else if window.rate >= baseline * self.config.growth_pays {
                    Situation::GrowthPaid
                } else if window.mean_in_flight_ns
                    < baseline_in_flight_ns * self.config.in_flight_grew
                    && limit_ns < self.bounds.max_limit_ns
                {
                    Situation::GrowthUnfelt
                } else {
                    Situation::GrowthWasted
                }
            }
            Probe::Down { baseline, .. } => {
                if window.rate >= baseline * self.config.shrink_keeps {
                    Situation::ShrinkFree
                } else {
                    Situation::ShrinkCostly
                }
            }
            Probe::None => return None,
        };
        Some(situation)
    }

    /// With no probe under way: whether to start one (rules 6 and 10), or hold.
    fn classify_between_probes(&self, window: &WindowSummary, limit_ns: Nanos) -> Situation {
        if !window.binding {
            return if self.shares_need_a_queue(window, limit_ns) {
                Situation::Settled
            } else {
                Situation::Idle
            };
        }
        if self.holds_left > 0 {
            return Situation::Fine;
        }
        // Probes alternate up and down only while Little's law judges the budget;
        // while reads judge it, a smaller budget buys them nothing, so probes go up.
        // The first window's rate counts the device's fill, so no shrink
        // probe is judged against it (rule 10).
        let probe_up = !self.probe_down_next || window.reads_recent;
        if self.has_room(window, limit_ns)
            && probe_up
            && limit_ns < self.bounds.max_limit_ns
            && self.now_ns >= self.grow_not_before_ns
        {
            Situation::Underused
        } else if self.may_shrink(window, limit_ns, false)
            && !window.reads_recent
            && self.stats.windows > 0
        {
            Situation::Settled
        } else {
            Situation::Fine
        }
    }

    /// Names the situation while a writer is alone (module docs, rule 5):
    /// growth is judged, and started, only on the rate averaged over
    /// [`ControllerConfig::knee_completions`] since the budget last changed,
    /// and the budget never probes downwards.
    fn classify_for_throughput(&self, window: &WindowSummary, limit_ns: Nanos) -> Situation {
        let measured = window.span_completions >= self.config.knee_completions
            && window.span_ns >= self.config.knee_min_ns;
        match self.probe {
            Probe::Up {
                baseline,
                baseline_in_flight_ns,
                hinted,
                ..
            } => {
                if !measured {
                    Situation::Fine
                } else if !window.binding {
                    Situation::GrowthWasted
                } else if window.span_rate >= baseline * self.config.growth_pays {
                    Situation::GrowthPaid
                } else if !hinted
                    && window.span_rate >= baseline * self.config.growth_hints
                    && limit_ns < self.bounds.max_limit_ns
                {
                    // Grows on once (see `ControllerConfig::growth_hints`).
                    Situation::GrowthUnfelt
                } else if window.span_mean_in_flight_ns
                    < baseline_in_flight_ns * self.config.in_flight_grew
                    && limit_ns < self.bounds.max_limit_ns
                {
                    Situation::GrowthUnfelt
                } else {
                    Situation::GrowthWasted
                }
            }
            Probe::Down { baseline, .. } => {
                if window.rate >= baseline * self.config.shrink_keeps {
                    Situation::ShrinkFree
                } else {
                    Situation::ShrinkCostly
                }
            }
            Probe::None if !window.binding => Situation::Idle,
            // Not Idle: a window that binds ends slow start (rule 4).
            Probe::None if !measured => Situation::Fine,
            Probe::None if self.holds_left > 0 => Situation::Fine,
            Probe::None
                if limit_ns < self.bounds.max_limit_ns
                    && self.now_ns >= self.grow_not_before_ns =>
            {
                Situation::Underused
            }
            Probe::None => Situation::Fine,
        }
    }

    /// Whether a shrink probe may start, or go on, from `limit_ns`: not within
    /// the backoff after a costly one ([`ControllerConfig::shrink_backoff_ns`]), and not below
    /// [`ControllerConfig::shrink_floor_pieces`] pieces (of the window's mean
    /// piece only, `for_shares`, since the shares of the classes that run
    /// are what rule 14 serves; and of the size it would split to otherwise).
    fn may_shrink(&self, window: &WindowSummary, limit_ns: Nanos, for_shares: bool) -> bool {
        let shrunk = self.clamp(limit_ns as f64 * self.config.shrink_step);
        let split_piece_ns = if for_shares {
            0.0
        } else {
            self.split_piece_cost_ns(shrunk) as f64
        };
        let piece_ns = window.mean_piece_cost_ns.max(split_piece_ns);
        shrunk < limit_ns
            && self.now_ns >= self.shrink_not_before_ns
            && shrunk as f64 >= self.config.shrink_floor_pieces * piece_ns
    }

    /// Whether a budget that did not bind is deep enough to probe downwards
    /// for the sake of shares (rule 14): two or more classes each had more
    /// than [`ControllerConfig::shared_queue_pieces`] pieces in flight, and
    /// a shrink probe may start.
    fn shares_need_a_queue(&self, window: &WindowSummary, limit_ns: Nanos) -> bool {
        window.shared && self.holds_left == 0 && self.may_shrink(window, limit_ns, true)
    }

    /// Whether a growth step stays within the goal: by the reads themselves
    /// while there are any (none was late, or the window would be congested),
    /// always for a writer alone (throughput is its only goal), by Little's
    /// law otherwise.
    fn has_room(&self, window: &WindowSummary, limit_ns: Nanos) -> bool {
        window.reads_recent
            || window.unprotected
            || (limit_ns as f64 * self.config.grow_step) / window.rate <= self.goal_ns()
    }

    /// Whether the device showed a stall within [`ControllerConfig::stall_memory_ns`]: the
    /// pipeline-pieces rule is on (see the module docs).
    pub fn stalls(&self) -> bool {
        self.stalls_until_ns
            .is_some_and(|until| self.now_ns < until)
    }

    /// Turns the pipeline-pieces rule on (or keeps it on) after a stalled
    /// window whose stall was at most [`ControllerConfig::pipeline_stall_targets`] targets long.
    fn note_stall(&mut self, window: &WindowSummary) {
        let short = window.longest_gap_ns
            <= self
                .config
                .pipeline_stall_targets
                .saturating_mul(self.bounds.latency_target_ns);
        if window.stalled && short {
            self.stalls_until_ns = Some(self.now_ns.saturating_add(self.config.stall_memory_ns));
        }
        self.stats.stalls = self.stalls();
    }

    /// While the device stalls, `limit_ns` cut to [`PIPELINE_PIECES`] pieces
    /// of the size it splits to; otherwise (or without a known profile)
    /// `limit_ns` unchanged.
    fn pipeline_cap_ns(&self, limit_ns: f64) -> f64 {
        if !self.stalls() || self.pieces.is_none() {
            return limit_ns;
        }
        let piece_ns = self.split_piece_cost_ns(limit_ns as Nanos);
        limit_ns.min((PIPELINE_PIECES * piece_ns) as f64)
    }

    /// A decision `new` (or holding `limit_ns`) cut to the pipeline cap.
    fn cap_to_pipeline(&self, new: Option<Nanos>, limit_ns: Nanos) -> Option<Nanos> {
        let decided_ns = new.unwrap_or(limit_ns);
        let capped_ns = self.clamp(self.pipeline_cap_ns(decided_ns as f64));
        (capped_ns < decided_ns).then_some(capped_ns).or(new)
    }

    /// While the device stalls, a growth step from `limit_ns` that the
    /// pipeline cap would take back goes instead to the smallest budget that
    /// splits to larger pieces: more pieces of the same size buy nothing there.
    fn next_split_ns(&self, limit_ns: Nanos, grown: f64) -> f64 {
        if !self.stalls() || self.pieces.is_none() || self.pipeline_cap_ns(grown) > limit_ns as f64
        {
            return grown;
        }
        let piece_ns = self.split_piece_cost_ns(limit_ns);
        let step_ns = (piece_ns / 8).max(1);
        let mut next_ns = limit_ns;
        while self.split_piece_cost_ns(next_ns) <= piece_ns && next_ns < self.bounds.max_limit_ns {
            next_ns = next_ns.saturating_add(step_ns);
        }
        grown.max(next_ns as f64)
    }

    fn clamp(&self, limit_ns: f64) -> Nanos {
        (limit_ns.round() as Nanos).clamp(self.bounds.min_limit_ns, self.bounds.max_limit_ns)
    }

    /// The largest budget whose queue drains within the goal at `rate`.
    fn ceiling_ns(&self, rate: f64) -> f64 {
        self.goal_ns() * rate
    }

    /// The cut a congested window makes, as a factor of the limit.
    fn congestion_cut(&self, window: &WindowSummary, limit_ns: Nanos) -> f64 {
        let goal = self.goal_ns();
        let mut cut: f64 = 1.0;
        if window.delay_ns > goal {
            cut = cut.min(self.ceiling_ns(window.rate) / limit_ns as f64);
        }
        if window.worst_late_read_ns > 0 {
            cut = cut.min(self.bounds.latency_target_ns as f64 / window.worst_late_read_ns as f64);
        }
        // Either order of the two bounds works, and a NaN bound is ignored
        // (`clamp` would panic on both).
        let (deepest, shallowest) = (
            self.config.congestion_cut_max,
            self.config.congestion_cut_min,
        );
        cut.max(deepest.min(shallowest))
            .min(shallowest.max(deepest))
    }

    fn grow(
        &mut self,
        situation: Situation,
        window: &WindowSummary,
        limit_ns: Nanos,
    ) -> Option<Nanos> {
        if situation == Situation::GrowthPaid {
            self.paid_streak += 1;
        }
        let step = if self.paid_streak >= 2 || window.unprotected {
            self.config.grow_step_fast
        } else {
            self.config.grow_step
        };
        // The congestion threshold guards reads; a writer alone has none.
        let grown = if window.unprotected {
            limit_ns as f64 * step
        } else {
            self.bound_by_threshold(limit_ns, limit_ns as f64 * step)
        };
        let mut grown = self.next_split_ns(limit_ns, grown);
        if !self.has_room(window, limit_ns) {
            grown = grown.min(self.ceiling_ns(window.rate));
        }
        let grown = self.clamp(self.pipeline_cap_ns(grown));
        if grown <= limit_ns {
            self.probe = Probe::None;
            self.holds_left = self.config.hold_windows;
            return None;
        }
        // An unfelt probe keeps the baseline it started from; one that grows
        // on from a hint (rule 5) does so once.
        if let (
            Situation::GrowthUnfelt,
            Probe::Up {
                hinted,
                hinted_ns,
                baseline,
                ..
            },
        ) = (situation, &mut self.probe)
        {
            let hint = window.unprotected
                && !*hinted
                && window.span_rate >= *baseline * self.config.growth_hints;
            if hint {
                *hinted_ns = Some(limit_ns);
            }
            *hinted |= window.unprotected;
            return Some(grown);
        }
        let (baseline, baseline_in_flight_ns) = if window.unprotected {
            (window.span_rate, window.span_mean_in_flight_ns)
        } else {
            (window.rate, window.mean_in_flight_ns)
        };
        self.probe = Probe::Up {
            from_ns: limit_ns,
            baseline,
            baseline_in_flight_ns,
            baseline_missed: window.missed_share(),
            hinted: false,
            hinted_ns: None,
        };
        Some(grown)
    }

    /// Acts on a situation: the new limit, or `None` to hold.
    fn act(
        &mut self,
        situation: Situation,
        window: &WindowSummary,
        limit_ns: Nanos,
    ) -> Option<Nanos> {
        let limit = limit_ns as f64;
        if !matches!(situation, Situation::SlowStart | Situation::Idle) {
            self.slow_start = false;
        }
        self.note_paid_above_threshold(situation, limit_ns);
        let new = match situation {
            Situation::Idle | Situation::Fine => {
                self.holds_left = self.holds_left.saturating_sub(1);
                None
            }
            Situation::SlowStart => Some(self.clamp(limit * self.config.grow_step_fast)),
            Situation::Congested => Some(self.cut_for_congestion(window, limit_ns)),
            Situation::GrowthPaid | Situation::GrowthUnfelt | Situation::Underused => {
                self.grow(situation, window, limit_ns)
            }
            Situation::GrowthWasted
            | Situation::Settled
            | Situation::ShrinkFree
            | Situation::ShrinkCostly => self.act_on_probe(situation, window, limit_ns),
        };
        let new = self.cap_to_pipeline(new, limit_ns);
        let new = new.filter(|&new| new != limit_ns);
        self.count_decision(situation, new, limit_ns);
        new
    }

    /// A congested window (rule 2): the budget cut to what drains within the
    /// goal, which becomes the congestion threshold.
    fn cut_for_congestion(&mut self, window: &WindowSummary, limit_ns: Nanos) -> Nanos {
        // Cut from what was in flight when the budget did not bind.
        let limit = if window.binding {
            limit_ns as f64
        } else {
            (limit_ns as f64).min(window.mean_in_flight_ns.max(1.0))
        };
        let cut = self.congestion_cut(window, limit.round() as Nanos);
        if matches!(self.probe, Probe::Up { .. }) {
            self.back_off_growth();
        }
        self.probe = Probe::None;
        self.paid_streak = 0;
        self.probe_down_next = false;
        self.holds_left = 1;
        let cut_to = self.clamp(limit * cut);
        self.threshold_ns = Some(cut_to);
        self.paid_above_threshold = 0;
        cut_to
    }

    /// Ends a probe by its verdict, or starts or goes on with a shrink probe
    /// (rules 7 and 10).
    fn act_on_probe(
        &mut self,
        situation: Situation,
        window: &WindowSummary,
        limit_ns: Nanos,
    ) -> Option<Nanos> {
        let limit = limit_ns as f64;
        match situation {
            Situation::GrowthWasted => {
                // Not backed off: a wasted probe is how the knee is found (and
                // on a stick, piece sizes are judged so).
                let Probe::Up {
                    from_ns, hinted_ns, ..
                } = self.probe
                else {
                    unreachable!("classified from a growth probe")
                };
                // While classes are alone, the budget at which the rate rose
                // by the hint is kept (rule 5).
                let from_ns = if window.unprotected {
                    hinted_ns.unwrap_or(from_ns)
                } else {
                    from_ns
                };
                self.probe = Probe::None;
                self.paid_streak = 0;
                self.probe_down_next = true;
                self.holds_left = self.config.hold_windows;
                Some(from_ns)
            }
            Situation::Settled => {
                self.probe = Probe::Down {
                    from_ns: limit_ns,
                    baseline: window.rate,
                    for_shares: !window.binding,
                };
                Some(self.clamp(limit * self.config.shrink_step))
            }
            Situation::ShrinkFree => {
                let Probe::Down {
                    baseline,
                    for_shares,
                    ..
                } = self.probe
                else {
                    unreachable!("classified from a shrink probe")
                };
                let shrunk = self.clamp(limit * self.config.shrink_step);
                if self.may_shrink(window, limit_ns, for_shares) {
                    // The baseline stays the rate before the first shrink: no drift.
                    self.probe = Probe::Down {
                        from_ns: limit_ns,
                        baseline,
                        for_shares,
                    };
                    Some(shrunk)
                } else {
                    self.probe = Probe::None;
                    self.probe_down_next = false;
                    self.holds_left = self.config.hold_windows;
                    None
                }
            }
            Situation::ShrinkCostly => {
                let Probe::Down { from_ns, .. } = self.probe else {
                    unreachable!("classified from a shrink probe")
                };
                self.probe = Probe::None;
                self.probe_down_next = false;
                self.holds_left = self.config.hold_windows;
                self.shrink_not_before_ns = self.now_ns.saturating_add(self.shrink_backoff_ns);
                self.shrink_backoff_ns = (self.shrink_backoff_ns.saturating_mul(2))
                    .min(self.config.shrink_backoff_max_ns);
                Some(from_ns)
            }
            _ => unreachable!("not a probe's situation: {situation:?}"),
        }
    }

    /// Counts a decision in the stats.
    fn count_decision(&mut self, situation: Situation, new: Option<Nanos>, limit_ns: Nanos) {
        match new {
            Some(new) if new > limit_ns => self.stats.grows += 1,
            Some(_) => self.stats.shrinks += 1,
            None => self.stats.holds += 1,
        }
        if situation == Situation::Congested {
            self.stats.congested += 1;
        }
        self.stats.threshold_ns = self.threshold_ns;
    }

    /// Adds the window that just ended to the span, or starts a new span
    /// when the budget changed.
    fn extend_span(&mut self, now: Nanos, changed: bool) {
        if changed {
            self.span = Span {
                skip: self.window.queued_pieces,
                start_ns: now,
                ..Span::default()
            };
            return;
        }
        if self.span.skip > 0 {
            self.span.skip = self.span.skip.saturating_sub(self.window.completions);
            self.span.start_ns = now;
            return;
        }
        if self.span.completions == 0 {
            self.span.start_ns = self.window.start_ns;
        }
        self.span.completions += self.window.completions;
        self.span.cost_ns += self.window.cost_ns;
        self.span.in_flight_sum_ns += self.window.in_flight_sum_ns;
    }

    /// A growth probe failed: the next one waits (see [`ControllerConfig::grow_backoff_ns`]).
    fn back_off_growth(&mut self) {
        self.grow_not_before_ns = self.now_ns.saturating_add(self.grow_backoff_ns);
        self.grow_backoff_ns =
            (self.grow_backoff_ns.saturating_mul(2)).min(self.config.grow_backoff_max_ns);
        self.stats.grow_backoff_ns = self.grow_backoff_ns;
    }

    /// Whether the overdue rule is on now.
    pub fn starving(&self) -> bool {
        self.starving_until_ns
            .is_some_and(|until| self.now_ns < until)
    }

    /// Turns the overdue rule on (or keeps it on) from one read's evidence: the
    /// device served many budgets of newer work before it. Any overtaking keeps
    /// the rule on, as the rule itself bounds how much can overtake a read.
    fn note_starvation(&mut self, sample: &CompletionSample, latency_ns: Nanos, limit_ns: Nanos) {
        let starved = latency_ns > self.bounds.latency_target_ns
            && sample.overtaken_ns / self.config.starved_overtaken_factor.max(1)
                > limit_ns.max(sample.ahead_ns);
        let still = self.starving() && sample.overtaken_ns > 0;
        if starved {
            self.stats.starved_reads += 1;
        }
        if starved || still {
            self.starving_until_ns =
                Some(sample.now.saturating_add(self.config.starvation_memory_ns));
        }
        self.stats.starving = self.starving();
    }

    fn record(
        &mut self,
        now: Nanos,
        situation: Situation,
        summary: &WindowSummary,
        before: Nanos,
        after: Option<Nanos>,
    ) {
        let rate_milli = (summary.rate * 1000.0).round() as u64;
        self.stats.windows += 1;
        self.stats.last = Some(situation);
        self.stats.rate_milli = rate_milli;
        self.stats.last_decision = Some(Decision {
            at_ns: now,
            situation,
            budget_before_ns: before,
            budget_after_ns: after.unwrap_or(before),
            rate_milli,
            delay_ns: if summary.delay_ns.is_finite() {
                summary.delay_ns.round() as Nanos
            } else {
                Nanos::MAX
            },
            reads: summary.reads,
            late_reads: summary.late_reads,
            over_target_reads: summary.over_target_reads,
        });
        self.last = *summary;
    }
}

/// Whether more reads missed the target in a growth probe's window than
/// before the probe (`baseline_missed`, a share): more than one, and more than
/// [`ControllerConfig::late_reads_per_hundred`] in a hundred of the window's reads.
fn reads_paid(window: &WindowSummary, baseline_missed: f64, late_reads_per_hundred: u64) -> bool {
    let extra_missed = window.over_target_reads as f64 - baseline_missed * window.reads as f64;
    extra_missed
        > f64::max(
            1.0,
            window.reads as f64 * late_reads_per_hundred as f64 / 100.0,
        )
}

impl LatencyController for AdaptiveBudget {
    fn on_completion(&mut self, sample: &CompletionSample, limit_ns: Nanos) -> Option<Nanos> {
        if !self.started {
            self.started = true;
            self.window.start_ns = sample.now.saturating_sub(sample.device_time_ns);
            // No writer counts as alone before it has been for a while (rule 5):
            // a reader starting beside it must not find it deepened already.
            self.last_shared_ns = Some(self.window.start_ns);
        }
        let window = &mut self.window;
        let since_ns = window.last_completion_ns.max(window.start_ns);
        window.longest_gap_ns = window
            .longest_gap_ns
            .max(sample.now.saturating_sub(since_ns));
        window.last_completion_ns = sample.now;
        window.completions += 1;
        window.cost_ns += u128::from(sample.cost_ns);
        window.in_flight_sum_ns += u128::from(sample.in_flight_ns);
        if sample.queued_pieces > 0 {
            window.backlogged += 1;
        }
        window.queued_pieces = sample.queued_pieces as u64;
        if sample.runner_up_in_flight_pieces > self.config.shared_queue_pieces {
            window.shared += 1;
        }
        self.now_ns = sample.now;
        if sample.direction == Direction::Read {
            self.last_read_ns = Some(sample.now);
        }
        // A backlogged class waits for itself (rule 1): its pieces neither
        // count as reads to protect nor as work that others could hold back.
        if !sample.class_backlogged
            && (sample.direction == Direction::Read || sample.ahead_other_ns > 0)
        {
            self.last_shared_ns = Some(sample.now);
        }
        // Only reads of classes that ask for less than they get are promised
        // the target (module docs, rule 1).
        if sample.direction == Direction::Read && !sample.class_backlogged {
            let window = &mut self.window;
            window.reads += 1;
            let latency_ns = sample.queue_wait_ns + sample.device_time_ns;
            if latency_ns > self.bounds.latency_target_ns {
                window.over_target_reads += 1;
            }
            // Only the device's part can say the budget is too large: time
            // waited in the fair queue says it is full (module docs,
            // rule 1); and only other classes' work ahead could have
            // been kept back for it.
            if sample.device_time_ns > self.bounds.latency_target_ns {
                window
                    .late_candidates
                    .push((sample.device_time_ns, sample.ahead_other_ns));
            }
            self.note_starvation(sample, latency_ns, limit_ns);
        }
        if !self.window_done(sample.now) {
            return None;
        }
        let summary = self.summarize(sample.now);
        self.note_stall(&summary);
        let situation = self.classify(&summary, limit_ns);
        let new = self.act(situation, &summary, limit_ns);
        self.record(sample.now, situation, &summary, limit_ns, new);
        self.extend_span(sample.now, new.is_some());
        let mut late_candidates = std::mem::take(&mut self.window.late_candidates);
        late_candidates.clear();
        self.window = Window {
            start_ns: sample.now,
            late_candidates,
            ..Window::default()
        };
        new
    }

    fn stats(&self) -> ControllerStats {
        self.stats
    }

    /// While the device starves reads ([`AdaptiveBudget::starving`]), a read is
    /// overdue as soon as it is the oldest piece in flight: the dispatcher then
    /// sends no newer work of classes with work in flight, the device drains
    /// what it holds and serves the read. A write is overdue once it took
    /// [`ControllerConfig::overdue_write_factor`] times what the work ahead and itself take at the
    /// last window's rate: a disk may skip one piece of a stream (its sector just
    /// passed) and then starve it like a read, with the reads behind it.
    ///
    /// Before any starvation is seen, a read is overdue after
    /// [`ControllerConfig::read_overdue_targets`] latency targets (the watchdog): the rule learns
    /// of starvation from a starved read's completion, and a disk streaming a
    /// well-pipelined writer may never serve that read by itself.
    fn overdue_after_ns(
        &self,
        direction: Direction,
        ahead_ns: Nanos,
        cost_ns: Nanos,
    ) -> Option<Nanos> {
        if !self.starving() {
            return (direction == Direction::Read).then(|| {
                self.bounds
                    .latency_target_ns
                    .saturating_mul(self.config.read_overdue_targets)
            });
        }
        match direction {
            Direction::Read => Some(0),
            Direction::Write => (self.last.rate > 0.0).then(|| {
                ((ahead_ns + cost_ns) as f64 * self.config.overdue_write_factor / self.last.rate)
                    as Nanos
            }),
        }
    }

    fn start_limit_ns(&self, derived_ns: Nanos) -> Nanos {
        if self.start_small {
            self.bounds.min_limit_ns
        } else {
            derived_ns
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_fixed_budget_takes_the_quiet_reads_rule() {
        let rule = Some(QuietReads::default());
        assert_eq!(ControllerChoice::Fixed.quiet_reads(rule), rule);
        assert_eq!(ControllerChoice::Fixed.quiet_reads(None), None);
        assert_eq!(ControllerChoice::Adaptive.quiet_reads(rule), None);
        assert!(ControllerChoice::Fixed.spares_latency_classes());
        assert!(!ControllerChoice::Adaptive.spares_latency_classes());
    }

    #[test]
    fn only_the_fixed_budget_on_a_device_through_a_file_takes_one_piece() {
        assert_eq!(ControllerChoice::Fixed.pipeline_pieces(false, true), 1);
        assert_eq!(
            ControllerChoice::Fixed.pipeline_pieces(false, false),
            PIPELINE_PIECES
        );
        assert_eq!(
            ControllerChoice::Adaptive.pipeline_pieces(false, true),
            PIPELINE_PIECES
        );
    }

    fn controller() -> AdaptiveBudget {
        AdaptiveBudget::new(BudgetBounds {
            latency_target_ns: 300_000,
            min_limit_ns: 10_000,
            max_limit_ns: 10_000_000,
        })
    }

    fn window(rate: f64, mean_in_flight: f64, binding: bool) -> WindowSummary {
        WindowSummary {
            completions: 100,
            rate,
            mean_in_flight_ns: mean_in_flight,
            delay_ns: mean_in_flight / rate,
            binding,
            ..WindowSummary::default()
        }
    }

    #[test]
    fn classifies_delay_over_the_goal_as_congested_and_cuts_to_what_drains() {
        let mut c = controller();
        // Goal 200 µs; 400 µs in flight at rate 1.0 is 400 µs of delay.
        let w = window(1.0, 400_000.0, true);
        assert_eq!(c.classify(&w, 400_000), Situation::Congested);
        assert_eq!(c.act(Situation::Congested, &w, 400_000), Some(200_000));
        // A device slowed to 30%: cut at most 4× in one window.
        let w = window(0.05, 400_000.0, true);
        assert_eq!(c.act(Situation::Congested, &w, 400_000), Some(100_000));
        assert_eq!(c.stats().congested, 2);
    }

    #[test]
    fn congestion_cut_bounds_in_either_order_give_the_same_cut() {
        let bounds = BudgetBounds {
            latency_target_ns: 300_000,
            min_limit_ns: 10_000,
            max_limit_ns: 10_000_000,
        };
        let default = ControllerConfig::default();
        let swapped = ControllerConfig {
            congestion_cut_max: default.congestion_cut_min,
            congestion_cut_min: default.congestion_cut_max,
            ..default
        };
        for (rate, in_flight_ns) in [(1.0, 400_000.0), (0.05, 400_000.0), (1.0, 250_000.0)] {
            let w = window(rate, in_flight_ns, true);
            let mut ordered = AdaptiveBudget::with_config(bounds, default);
            let mut reversed = AdaptiveBudget::with_config(bounds, swapped);
            assert_eq!(
                ordered.act(Situation::Congested, &w, 400_000),
                reversed.act(Situation::Congested, &w, 400_000),
                "rate {rate}"
            );
        }
    }

    #[test]
    fn late_reads_with_work_ahead_are_congestion_but_floors_are_not() {
        let c = controller();
        let mut w = window(1.0, 100_000.0, true);
        w.reads = 10;
        w.late_reads = 1;
        assert_eq!(c.classify(&w, 100_000), Situation::Congested);
        w.late_reads = 0; // late, but nothing ahead: the device's floor
        assert_ne!(c.classify(&w, 100_000), Situation::Congested);
    }

    #[test]
    fn growth_is_kept_only_when_it_pays_five_percent() {
        let mut c = controller();
        // Past the first window, from which no shrink probe starts.
        c.stats.windows = 1;
        let w = window(1.0, 50_000.0, true);
        assert_eq!(c.classify(&w, 50_000), Situation::Underused);
        let grown = c.act(Situation::Underused, &w, 50_000).unwrap();
        assert_eq!(grown, 62_500);
        assert_eq!(
            c.classify(&window(1.04, 60_000.0, true), grown),
            Situation::GrowthWasted
        );
        assert_eq!(
            c.classify(&window(1.06, 60_000.0, true), grown),
            Situation::GrowthPaid
        );
        let w = window(1.04, 60_000.0, true);
        assert_eq!(c.act(Situation::GrowthWasted, &w, grown), Some(50_000));
        // Then it holds, and the next probe goes down.
        for _ in 0..c.config.hold_windows {
            assert_eq!(c.classify(&w, 50_000), Situation::Fine);
            assert_eq!(c.act(Situation::Fine, &w, 50_000), None);
        }
        assert_eq!(c.classify(&w, 50_000), Situation::Settled);
        let stats = c.stats();
        assert_eq!(
            (stats.grows, stats.shrinks, stats.holds),
            (1, 1, c.config.hold_windows as u64)
        );
    }

    #[test]
    fn a_growth_that_changes_nothing_in_flight_grows_on_from_its_baseline() {
        let mut c = controller();
        let w = window(1.0, 50_000.0, true);
        let grown = c.act(Situation::Underused, &w, 50_000).unwrap();
        // Same pieces in flight, same rate: unfelt, not wasted.
        let same = window(1.0, 50_000.0, true);
        assert_eq!(c.classify(&same, grown), Situation::GrowthUnfelt);
        let again = c.act(Situation::GrowthUnfelt, &same, grown).unwrap();
        assert!(again > grown);
        // The verdict still compares with the rate before the first step.
        assert_eq!(
            c.classify(&window(1.06, 70_000.0, true), again),
            Situation::GrowthPaid
        );
    }

    #[test]
    fn recent_on_time_reads_overrule_littles_law_and_stop_downward_probes() {
        let mut c = controller();
        // 400 µs of delay is over the 200 µs goal, but reads were on time.
        let mut w = window(1.0, 400_000.0, true);
        w.reads_recent = true;
        w.reads = 10;
        assert_eq!(c.classify(&w, 400_000), Situation::Underused);
        w.reads_recent = false;
        assert_eq!(c.classify(&w, 400_000), Situation::Congested);
        // After a wasted growth, reads still judging: the next probe goes up.
        c.probe_down_next = true;
        w.reads_recent = true;
        assert_eq!(c.classify(&w, 400_000), Situation::Underused);
    }

    fn read(now: Nanos, latency_ns: Nanos, ahead_ns: Nanos) -> CompletionSample {
        CompletionSample {
            now,
            direction: Direction::Read,
            cost_ns: 1_000,
            device_time_ns: latency_ns,
            queue_wait_ns: 0,
            in_flight_ns: 100_000,
            ahead_ns,
            ahead_other_ns: ahead_ns,
            class_backlogged: false,
            queued_pieces: 1,
            runner_up_in_flight_pieces: 0,
            overtaken_ns: 0,
        }
    }

    /// One 10 ms window of 100 reads at rate 0.01 (1 µs of cost per 100 µs);
    /// one of them took `late_ns` with `ahead_ns` of work ahead of it.
    fn window_with_one_slow_read(late_ns: Nanos, ahead_ns: Nanos) -> WindowSummary {
        let mut c = controller();
        for i in 1..=100 {
            let sample = if i == 50 {
                read(i * 100_000, late_ns, ahead_ns)
            } else {
                read(i * 100_000, 100_000, 0)
            };
            c.on_completion(&sample, 100_000);
        }
        *c.last_window()
    }

    #[test]
    fn a_read_late_with_little_ahead_is_the_floor_not_congestion() {
        // 2 ms late with 1 µs ahead (0.1 ms at the rate): the device's floor.
        assert_eq!(window_with_one_slow_read(2_000_000, 1_000).late_reads, 0);
        // 2 ms late with 19 µs ahead (1.9 ms at the rate): queueing.
        let w = window_with_one_slow_read(2_000_000, 19_000);
        assert_eq!((w.late_reads, w.worst_late_read_ns), (1, 2_000_000));
    }

    #[test]
    fn a_read_that_waited_in_the_fair_queue_is_over_the_target_but_not_late() {
        // Ten of a window's 100 reads take 2 ms, 19 µs ahead of each (1.9 ms
        // at the window's rate): on the device they are late, congestion.
        // The same 2 ms spent mostly waiting for the budget (1.8 ms in the
        // fair queue) says the budget is full, not too large: over the
        // target, not late. Counting that wait sent a loop device's budget
        // down to its minimum and kept it there.
        let window_with = |queue_wait_ns: Nanos| {
            let mut c = controller();
            for i in 1..=100 {
                let mut sample = read(i * 100_000, 100_000, 0);
                if i % 10 == 0 {
                    sample = read(i * 100_000, 2_000_000 - queue_wait_ns, 19_000);
                    sample.queue_wait_ns = queue_wait_ns;
                }
                c.on_completion(&sample, 100_000);
            }
            (*c.last_window(), c.stats().last)
        };
        let (device, situation) = window_with(0);
        assert_eq!((device.late_reads, device.over_target_reads), (10, 10));
        assert_eq!(situation, Some(Situation::Congested));
        let (waited, situation) = window_with(1_800_000);
        assert_eq!((waited.late_reads, waited.over_target_reads), (0, 10));
        assert_ne!(situation, Some(Situation::Congested));
    }

    #[test]
    fn each_decision_is_recorded_whole() {
        let mut c = controller();
        let mut limit: Nanos = 100_000;
        for i in 1..=100 {
            if let Some(new) = c.on_completion(&read(i * 100_000, 100_000, 0), limit) {
                limit = new;
            }
        }
        let stats = c.stats();
        assert_eq!(stats.windows, 1);
        let decision = stats.last_decision.expect("one window judged");
        assert_eq!(decision.at_ns, 10_000_000);
        assert_eq!(decision.situation, stats.last.unwrap());
        assert_eq!(decision.budget_before_ns, 100_000);
        assert_eq!(decision.budget_after_ns, limit);
        assert_eq!((decision.rate_milli, decision.reads), (10, 100));
        assert_eq!(stats.grows + stats.shrinks + stats.holds, 1);
    }

    #[test]
    fn an_unfilled_budget_is_idle() {
        let c = controller();
        assert_eq!(
            c.classify(&window(0.5, 10_000.0, false), 50_000),
            Situation::Idle
        );
    }

    #[test]
    fn drives_a_budget_up_to_the_knee_through_the_trait() {
        // A device whose rate grows with in-flight cost up to 100 µs, then is flat.
        let mut c = controller();
        let mut limit: Nanos = 20_000;
        let mut now: Nanos = 0;
        for _ in 0..200_000 {
            let rate = (limit.min(100_000) as f64) / 100_000.0;
            let cost: Nanos = 1_000;
            now += (cost as f64 / rate) as Nanos;
            let sample = CompletionSample {
                now,
                direction: Direction::Write,
                cost_ns: cost,
                device_time_ns: 1_000,
                queue_wait_ns: 0,
                in_flight_ns: limit,
                ahead_ns: limit,
                ahead_other_ns: limit,
                class_backlogged: false,
                queued_pieces: 5,
                runner_up_in_flight_pieces: 0,
                overtaken_ns: 0,
            };
            if let Some(new) = c.on_completion(&sample, limit) {
                limit = new;
            }
        }
        assert!((80_000..=200_000).contains(&limit), "settled at {limit}");
        assert!(c.stats().grows > 0 && c.stats().windows > 10);
    }

    #[test]
    fn no_shrink_probe_starts_from_the_first_window() {
        // No reads, the goal (200 µs) leaves no room for a step from 180 µs:
        // a settled window, but the first one counts the device's fill.
        let mut c = controller();
        let w = window(1.0, 180_000.0, true);
        assert_eq!(c.classify(&w, 180_000), Situation::Fine);
        c.stats.windows = 1;
        assert_eq!(c.classify(&w, 180_000), Situation::Settled);
    }

    #[test]
    fn a_deep_unbound_queue_of_several_classes_is_probed_down_for_their_shares() {
        // Two classes with 64 reads of 1.2 µs in flight each, nothing queued, all
        // on time: the budget binds nothing, yet only a queue lets the fair
        // queue split the device by shares.
        let mut c = controller();
        let deep = |shared: bool| WindowSummary {
            completions: 64,
            rate: 1.0,
            mean_in_flight_ns: 153_600.0,
            delay_ns: 153_600.0,
            mean_piece_cost_ns: 1_200.0,
            binding: false,
            shared,
            reads: 64,
            reads_recent: true,
            ..WindowSummary::default()
        };
        assert_eq!(
            c.classify(&deep(false), 500_000),
            Situation::Idle,
            "one deep class"
        );
        let mut limit = 500_000;
        for _ in 0..20 {
            let (situation, new) = judge(&mut c, &deep(true), limit);
            assert!(
                matches!(situation, Situation::Settled | Situation::ShrinkFree),
                "{situation:?} at {limit}"
            );
            if new == limit {
                break;
            }
            limit = new;
        }
        // Down to a floor of three of the window's pieces, far below the
        // in-flight cost: the budget binds.
        assert!((3_600..153_600 / 2).contains(&limit), "stopped at {limit}");
    }

    #[test]
    fn a_wasted_probe_of_saturating_classes_keeps_the_budget_the_hint_raised() {
        // Saturating classes alone (rule 5): from 100 µs the rate rises 3%
        // at 200 µs (a hint, it grows on) and then no more at 400 µs.
        let mut c = controller();
        let alone = |span_rate: f64, in_flight_ns: f64| WindowSummary {
            span_completions: 1_000,
            span_rate,
            span_mean_in_flight_ns: in_flight_ns,
            span_ns: NANOS_PER_SECOND,
            unprotected: true,
            ..window(span_rate, in_flight_ns, true)
        };
        assert_eq!(
            judge(&mut c, &alone(1.0, 100_000.0), 100_000),
            (Situation::Underused, 200_000)
        );
        assert_eq!(
            judge(&mut c, &alone(1.03, 200_000.0), 200_000),
            (Situation::GrowthUnfelt, 400_000)
        );
        assert_eq!(
            judge(&mut c, &alone(1.035, 400_000.0), 400_000),
            (Situation::GrowthWasted, 200_000),
            "back to where the rate rose, not below it"
        );
    }

    /// Drives one 10 ms window from `start_ns` at `limit_ns`, as a virtio disk
    /// showed it (1 ms target; the demo's 16 readers beside a 1 MiB writer):
    /// `writes` writes of 2.1 ms of cost, reads filling the rest of 105
    /// completions, 6 ms of cost in flight. With `late`, 48 of the reads take
    /// 2.58 ms with 3.2 ms of cost ahead (0.75 ms at the window's rate of 4.3):
    /// late by more than the work ahead explains, so each is excused as the
    /// floor; the others take 0.5 ms. Returns the new limit, if any.
    fn virtio_window(
        c: &mut AdaptiveBudget,
        start_ns: Nanos,
        writes: u64,
        late: bool,
        limit_ns: Nanos,
    ) -> Option<Nanos> {
        let mut decision = None;
        for k in 1..=105u64 {
            let now = start_ns + k * 10_000_000 / 105;
            let write = k % 5 == 1 && k <= 5 * writes;
            let slow = late && (k % 2 == 0 || k > 93);
            let sample = CompletionSample {
                now,
                direction: if write {
                    Direction::Write
                } else {
                    Direction::Read
                },
                cost_ns: if write { 2_100_000 } else { 10_000 },
                device_time_ns: match (write, slow) {
                    (true, _) => now.min(12_000_000),
                    (false, true) => 2_580_000,
                    (false, false) => 500_000,
                },
                queue_wait_ns: 0,
                in_flight_ns: 6_000_000,
                ahead_ns: if write { 6_000_000 } else { 3_200_000 },
                ahead_other_ns: if write { 6_000_000 } else { 3_200_000 },
                class_backlogged: false,
                queued_pieces: 8,
                runner_up_in_flight_pieces: 0,
                overtaken_ns: 0,
            };
            decision = c.on_completion(&sample, limit_ns);
        }
        decision
    }

    #[test]
    fn a_growth_that_made_reads_late_is_wasted_even_if_each_is_excused() {
        let mut c = AdaptiveBudget::new(BudgetBounds {
            latency_target_ns: 1_000_000,
            min_limit_ns: 80_000,
            max_limit_ns: 64_000_000,
        });
        // Reads on time: room, so the budget probes upwards.
        let limit: Nanos = 2_960_000;
        let grown = virtio_window(&mut c, 0, 18, false, limit).expect("a probe");
        assert_eq!(
            (c.stats().last, grown),
            (Some(Situation::Underused), 3_700_000)
        );
        // The probe's window: the rate rose 11%, and 48 of 85 reads missed the
        // target, every one excused as the floor. Before, the rate alone judged
        // it paid (on the disk: doubled twice more, to 15 ms of cost).
        let undone = virtio_window(&mut c, 10_000_000, 20, true, grown);
        let window = *c.last_window();
        assert_eq!((window.reads, window.over_target_reads), (85, 48));
        assert_eq!(window.late_reads, 0, "each excused as the floor");
        assert!(window.rate > 1.05 * 3.87 && window.rate < 4.3);
        assert_eq!(c.stats().last, Some(Situation::GrowthWasted));
        assert_eq!(undone, Some(limit));
    }

    /// Classifies `w` at `limit_ns` and acts on it, as a window's end does.
    fn judge(c: &mut AdaptiveBudget, w: &WindowSummary, limit_ns: Nanos) -> (Situation, Nanos) {
        let situation = c.classify(w, limit_ns);
        let new = c.act(situation, w, limit_ns).unwrap_or(limit_ns);
        (situation, new)
    }

    #[test]
    fn after_congestion_paid_growth_adds_steps_and_does_not_double() {
        // The virtio sawtooth: congestion, then windows the noisy rate judges
        // paid. Before the threshold, the second paid window doubled the
        // budget (300 µs to 600 µs, three times the delay goal).
        let mut c = controller();
        let reading = |rate: f64, in_flight: f64| {
            let mut w = window(rate, in_flight, true);
            (w.reads_recent, w.reads) = (true, 10);
            w
        };
        let congested = window(1.0, 400_000.0, true);
        let (situation, mut limit) = judge(&mut c, &congested, 400_000);
        assert_eq!((situation, limit), (Situation::Congested, 200_000));
        assert_eq!(c.congestion_threshold_ns(), Some(200_000));
        assert_eq!(
            judge(&mut c, &reading(1.0, 200_000.0), limit).0,
            Situation::Fine
        );
        let mut steps = Vec::new();
        let mut rate = 1.0;
        for _ in 0..c.config.threshold_paid_windows {
            let (situation, new) = judge(&mut c, &reading(rate, limit as f64), limit);
            steps.push((situation, new));
            limit = new;
            rate *= 1.1;
        }
        // Each step adds a quarter of the threshold: never doubles.
        assert_eq!(
            steps,
            [
                (Situation::Underused, 250_000),
                (Situation::GrowthPaid, 300_000),
                (Situation::GrowthPaid, 350_000),
                (Situation::GrowthPaid, 400_000),
            ]
        );
        assert_eq!(c.stats().additive_grows, 3);
        // The fourth paid window in a row forgets the threshold: the device
        // takes more than when it congested, and growth doubles again.
        let (situation, new) = judge(&mut c, &reading(rate, limit as f64), limit);
        assert_eq!((situation, new), (Situation::GrowthPaid, 2 * limit));
        assert_eq!(c.stats().threshold_ns, None);
    }

    #[test]
    fn a_failed_growth_probe_delays_the_next_and_each_failure_doubles_the_wait() {
        // The virtio limit cycle: a probe, congestion, one window held, a
        // probe again, congestion again, every 30-40 ms. Before the backoff
        // the window after the hold probed upwards at once.
        let mut c = controller();
        let reading = |in_flight: f64| {
            let mut w = window(1.0, in_flight, true);
            (w.reads_recent, w.reads) = (true, 10);
            w
        };
        let congested = |in_flight: f64| {
            let mut w = reading(in_flight);
            (w.late_reads, w.over_target_reads, w.worst_late_read_ns) = (2, 2, 400_000);
            w
        };
        let ms = NANOS_PER_MILLISECOND;
        let mut limit = 200_000;
        let probe_then_congest = |c: &mut AdaptiveBudget, at_ns: Nanos, limit: &mut Nanos| {
            c.now_ns = at_ns;
            let (situation, grown) = judge(c, &reading(*limit as f64), *limit);
            assert_eq!(situation, Situation::Underused, "at {at_ns} ns");
            c.now_ns = at_ns + 10 * ms;
            let (situation, cut) = judge(c, &congested(grown as f64), grown);
            assert_eq!(situation, Situation::Congested);
            *limit = cut;
        };
        probe_then_congest(&mut c, 0, &mut limit);
        // Held: the window after the congestion, and every one within 100 ms of it.
        for at_ms in [20, 30, 60, 100] {
            c.now_ns = at_ms * ms;
            assert_eq!(
                judge(&mut c, &reading(limit as f64), limit).0,
                Situation::Fine
            );
        }
        probe_then_congest(&mut c, 110 * ms, &mut limit);
        // The second failure doubles the wait: 200 ms from the congestion at 120 ms.
        for at_ms in [130, 200, 310] {
            c.now_ns = at_ms * ms;
            assert_eq!(
                judge(&mut c, &reading(limit as f64), limit).0,
                Situation::Fine
            );
        }
        probe_then_congest(&mut c, 320 * ms, &mut limit);
        assert_eq!(c.stats().grow_backoff_ns, 8 * c.config.grow_backoff_ns);
        // A congestion with no probe on (the device slowed) does not add to it.
        c.now_ns = 400 * ms;
        assert_eq!(
            judge(&mut c, &congested(limit as f64), limit).0,
            Situation::Congested
        );
        assert_eq!(c.stats().grow_backoff_ns, 8 * c.config.grow_backoff_ns);
    }

    #[test]
    fn one_read_over_the_target_does_not_condemn_a_growth() {
        // Ten reads a window (`nvme`'s write-cache stalls make one in 250 late):
        // one late read in the probe's window is not more than one.
        let mut c = controller();
        let w = window(1.0, 50_000.0, true);
        let grown = c.act(Situation::Underused, &w, 50_000).unwrap();
        let mut probe = window(1.1, 60_000.0, true);
        probe.reads = 10;
        probe.over_target_reads = 1;
        assert_eq!(c.classify(&probe, grown), Situation::GrowthPaid);
        probe.over_target_reads = 2;
        assert_eq!(c.classify(&probe, grown), Situation::GrowthWasted);
    }

    #[test]
    fn after_a_stall_the_budget_holds_two_pieces_and_grows_by_their_size() {
        // A USB stick from the guessed profile (500 ms target), reads on time.
        let profile = DeviceProfile::uncalibrated(128 * 1024, 500_000);
        let fresh = || AdaptiveBudget::for_profile(&profile).starting_small(false);
        let reading = |in_flight_ns: Nanos| {
            let mut w = window(0.0055, in_flight_ns as f64, true);
            (w.reads_recent, w.reads) = (true, 10);
            w
        };
        let stalled = WindowSummary {
            stalled: true,
            longest_gap_ns: 400 * NANOS_PER_MILLISECOND,
            ..reading(1_280_000)
        };
        // No stall seen: growth adds a quarter, whatever the pieces.
        let mut c = fresh();
        let limit: Nanos = 1_280_000;
        assert_eq!(
            judge(&mut c, &reading(limit), limit),
            (Situation::Underused, 1_600_000)
        );
        // After a stall the budget is cut to two pieces of its split size.
        let mut c = fresh();
        c.note_stall(&stalled);
        assert!(c.stalls() && c.stats().stalls);
        let (situation, capped) = judge(&mut c, &reading(limit), limit);
        assert_eq!(situation, Situation::Underused);
        let piece_ns = c.split_piece_cost_ns(capped);
        assert!(capped < limit && capped == PIPELINE_PIECES * piece_ns);
        // From two small pieces, growth goes to the next split size, not to a
        // third piece of the same size.
        let mut c = fresh();
        c.note_stall(&stalled);
        let small = PIPELINE_PIECES * c.split_piece_cost_ns(200_000);
        let (situation, grown) = judge(&mut c, &reading(small), small);
        assert_eq!(situation, Situation::Underused);
        let grown_piece_ns = c.split_piece_cost_ns(grown);
        assert!(grown_piece_ns > c.split_piece_cost_ns(small));
        assert_eq!(grown, PIPELINE_PIECES * grown_piece_ns);
        // The rule ends STALL_MEMORY_NS after the last stalled window.
        c.now_ns += c.config.stall_memory_ns;
        assert!(!c.stalls());
        // A stall longer than PIPELINE_STALL_TARGETS targets (a host flush
        // far beyond the target) leaves the rule off: the queue is a small
        // part of what a read behind it waits.
        let mut c = fresh();
        c.note_stall(&WindowSummary {
            longest_gap_ns: 1_200 * NANOS_PER_MILLISECOND,
            ..stalled
        });
        assert!(!c.stalls());
        assert_eq!(
            judge(&mut c, &reading(limit), limit),
            (Situation::Underused, 1_600_000)
        );
    }
}
