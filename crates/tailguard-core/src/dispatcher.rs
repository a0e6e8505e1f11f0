//! One device's dispatcher: split, queue fairly, dispatch within the budget, rejoin.
//!
//! A [`Dispatcher`] owns everything tailguard decides for one device. The engine
//! (or the simulator) calls three methods, always passing the current time:
//!
//! 1. [`Dispatcher::enqueue`] a request. A request longer than the split size
//!    of its direction is split into pieces of at most that size; the pieces
//!    enter the class's FIFO together, in offset order. The split size is derived
//!    from the budget so that two pieces fit in it (see [`crate::budget`]), and is
//!    never more than the profile's `max_request_bytes` (unless the device's
//!    direct-I/O alignment is larger: then one aligned block). When the budget shrinks
//!    the split size with it, pieces already queued at the larger size are cut
//!    to the new one as they reach the head of the queue.
//! 2. [`Dispatcher::dispatch`]: while the fair queue's next piece fits the
//!    [`Budget`], or its class has nothing in flight (the progress rule, see
//!    [`crate::budget`]), pop it, charge its class and hand it out with a token.
//!    While no read is queued or in flight, and none was for a while, the
//!    budget admits [`QuietReads::limit_factor`] times its limit
//!    ([`DispatcherConfig::quiet_reads`], see [`crate::quiet_reads`]).
//!    With [`DispatcherConfig::spare_latency_classes`], a piece of a latency
//!    class (less than the budget queued and in flight) needs room beside
//!    the other classes' work only: a light reader's reads in flight do not
//!    hold back its next one, so it never waits in the fair queue for a
//!    write to finish while the writes in flight leave it room.
//!    When the head piece may not go, a piece of another class that fits and
//!    costs at most a [`BYPASS_COST_RATIO`]th of the head may go past it, if
//!    that class has less than a budget queued (a latency class, not a backlog) and is at most its wake credit ahead of the head
//!    in virtual time (so the share guarantee keeps a bound: see
//!    [`crate::fair_queue`]); the loop stops when neither may go. One call
//!    drains everything that may go, so an engine submits in batches.
//!    While the oldest piece in flight is *overdue* (the latency controller says
//!    when: [`LatencyController::overdue_after_ns`]), only the progress rule
//!    applies, so a device that keeps serving newer work before an old piece (a
//!    disk's shortest-seek-first queue starving a read behind a sequential
//!    stream) runs out of newer work and serves it.
//!    On a rotational device ([`DispatcherConfig::slice_ns`] set), two
//!    classes that both have a backlog are served in *slices*: the class
//!    served last goes on while it is at most one *turn* ahead of the head
//!    in virtual time, then the head class takes over and runs its own turn.
//!    A turn is the same virtual time for every class: its shares' part of
//!    a round of one slice of device time per class with a backlog, so a
//!    round lasts the slice times the classes, whatever the ratio of their
//!    shares, and a class with few shares gets short turns rather than long
//!    waits. A disk then serves one class's region at a
//!    time instead of seeking between two regions per piece, and shares hold
//!    over a few rounds. There each class is charged at its *pace* (see
//!    [`crate::pace`]): its cost over how many times faster than charged
//!    the disk has been serving it, so virtual time, turns and shares count
//!    the disk's own time, not the cost model's average of it. A class has
//!    a backlog when its work queued and in flight reaches the budget, or
//!    [`SLICE_BACKLOG_FRACTION`] of the slice (a latency target, with the
//!    default slice) when the budget is larger (a budget no class can fill
//!    alone must not end the slices; a sequential writer's deep queue costs
//!    only its transfers); a class asking for less (a latency class) is never
//!    held back by a slice: while one runs, a latency class's piece that may
//!    go goes first, up to the slice plus its wake credit of its own device
//!    time ahead of the waiting head. While the slice's class has all of its work at
//!    the device, the other class still waits: the slice's class's next
//!    piece comes with its next completion, and the room it leaves in the
//!    budget is not given to another region. On a rotational device a class
//!    with such a backlog is also *backlogged* for the latency controller
//!    (its reads wait for its own slices, which no budget shortens).
//! 3. [`Dispatcher::complete`] a token when the device is done with the piece. The
//!    budget is released, the latency controller sees the sample, and when the last
//!    piece of a request is done the request's [`Completion`] comes back.
//!
//! Every request completes exactly once: pieces are tracked in a slab indexed by
//! the token, and completing an unknown or already completed token is an error,
//! not a silent double completion. The slabs reuse their slots, so a steady stream
//! of requests allocates nothing after warm-up.
//!
//! A class may have a rate limit ([`Dispatcher::set_rate_limit`]; see
//! [`crate::rate_limit`]): each piece dispatched is charged to its token
//! buckets, and a class in debt is *held* in the fair queue, which then skips
//! it without losing its place (see [`crate::fair_queue`]). Each dispatch
//! first releases the held classes whose debt is paid by `now`.
//! [`Dispatcher::next_eligible_at`] says when the next held class with queued
//! work becomes eligible, so that an engine sleeps until then at the latest
//! (no busy loop, and no stall when only capped work is queued).
//!
//! Classes are created, changed and removed at run time. Removing a class that
//! still has queued or in-flight pieces retires it: it accepts no more requests and
//! its slot is freed when the last piece completes, so nothing it submitted is lost.
//! Class handles carry a generation, so a handle to a removed class is rejected
//! even after its slot is reused.

use crate::budget::{self, Budget};
use crate::controller::{CompletionSample, ControllerStats, FixedBudget, LatencyController};
use crate::error::CoreError;
use crate::fair_queue::{self, FairQueue, SHARES_MAX, SHARES_MIN};
use crate::pace::{Pace, ServiceClock};
use crate::profile::{CostModel, DeviceProfile};
use crate::quiet_reads::{QuietReads, ReadWatch};
use crate::rate_limit::{ClassLimiter, RateLimit};
use crate::request::{Direction, IoRequest, Nanos, RequestId};
use crate::streams::StreamEnds;
use std::collections::VecDeque;
use std::fmt;

/// How many times its own cost a waiting head piece must cost for a piece of
/// another class to go past it: the blocking this removes is a small read's
/// behind a large write's wait for room, while pieces of similar size keep
/// strict virtual-time order (between them the wait is short anyway).
pub const BYPASS_COST_RATIO: u64 = 4;

/// On a rotational device, a class whose work queued and in flight reaches
/// this fraction of the slice (one latency target, with the default slice)
/// has a backlog even when the budget is larger: such a class waits for its
/// own work for a latency target or more, so it is not a latency class, and
/// the budget growing past what it can fill must not end the slices (which
/// would mix two classes' regions at the disk). A sequential writer with 64
/// pieces of 128 KiB outstanding holds only about 55 ms of transfers on a
/// 150 MB/s disk, since a piece that continues a stream costs its transfer
/// alone. Higher counts fewer classes as backlogged when the budget is
/// large; lower holds classes with fewer requests outstanding to slices.
pub const SLICE_BACKLOG_FRACTION: f64 = 0.1;

/// Completed entries the dispatch order may hold beyond twice the pieces in
/// flight before it drops them all at once: the pass is then paid once per
/// many dispatches.
const DISPATCH_ORDER_SLACK: usize = 64;

/// A class of one dispatcher. Cheap to copy; stale handles are detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId {
    index: u32,
    generation: u32,
}

impl ClassId {
    /// The class's slot, dense from zero: usable as an index into per-class arrays.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

/// How a dispatcher is set up.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatcherConfig {
    /// What the device can do, and the latency target.
    pub profile: DeviceProfile,
    /// Overrides the budget derived from the profile (nanoseconds of cost).
    pub budget_ns: Option<Nanos>,
    /// On a rotational device, the device time per class with a backlog in
    /// a round of turns, each class's turn being its shares' part of the
    /// round (the *slice*; see [`crate::dispatcher`]): longer slices save
    /// the seeks between classes' regions and lengthen the wait of the
    /// classes not served; `None` (the default, right for any device without
    /// seeks) serves strictly by virtual time.
    pub slice_ns: Option<Nanos>,
    /// Whether, and how far, the budget deepens while no one reads (the
    /// quiet-reads rule, [`crate::quiet_reads`]): `None` (the default) keeps
    /// one budget always. The engine turns it on with the fixed budget; the
    /// adaptive controller grows the budget itself while no one reads.
    pub quiet_reads: Option<QuietReads>,
    /// How many pieces of the split size one budget holds while reads come
    /// (see "The split size follows the budget" in [`crate::budget`]): two
    /// (the default, [`budget::PIPELINE_PIECES`]) keep the next piece queued
    /// before the current one ends, which a device that seeks needs and most
    /// others reward with more writes; one gives fewer, larger pieces, which
    /// delay the reads behind them less on a device whose every command
    /// costs the reads more than its bytes (a loop device). During a quiet
    /// (the quiet-reads rule) writes are split for two pieces always.
    pub pipeline_pieces: u64,
    /// Whether a latency class (its work queued and in flight less than the
    /// budget) may go when the other classes' work in flight leaves room
    /// for its piece, its own work in flight not counted against it:
    /// `true` keeps a light reader's next read from waiting in the fair
    /// queue for room its own reads in flight took (the work ahead of it at
    /// the device then stays within the budget plus less than a budget of
    /// its own class's), at the cost of fewer writes in flight while it
    /// reads; `false` (the default) counts all work alike. The engine and
    /// the simulator take it with the fixed budget
    /// (`ControllerChoice::spares_latency_classes`); the adaptive controller
    /// sizes its budget from what the reads in it see.
    pub spare_latency_classes: bool,
    /// What every split size is a multiple of, and at least: the device's
    /// direct-I/O offset alignment where it exceeds 4 KiB
    /// ([`budget::SPLIT_BYTES_MIN`], the default), so that no piece of an
    /// aligned request starts off alignment; a larger one only makes the
    /// smallest pieces of small budgets larger.
    pub piece_alignment_bytes: u64,
    /// Whether the device seeks (a rotational disk): a piece that continues
    /// a sequential stream of its class then costs only its transfer, while
    /// the budget holds two such pieces, since the command term of the cost
    /// model is mostly the seek it does not pay (see [`crate::streams`]);
    /// `false` (the default, right for an SSD, whose per-command work is
    /// paid whatever the offset) charges every piece the full cost.
    pub seeks: bool,
}

/// A rotational device's default slice, in latency targets
/// ([`DispatcherConfig::default_slice_ns`]): long enough that a disk's
/// command queue fills with one class's region and the seeks between two
/// regions are a small part of the slice.
pub const SLICE_LATENCY_TARGETS: u64 = 10;

impl DispatcherConfig {
    /// The configuration for a profile, with the derived budget.
    pub fn new(profile: DeviceProfile) -> Self {
        Self {
            profile,
            budget_ns: None,
            slice_ns: None,
            quiet_reads: None,
            pipeline_pieces: budget::PIPELINE_PIECES,
            spare_latency_classes: false,
            piece_alignment_bytes: budget::SPLIT_BYTES_MIN,
            seeks: false,
        }
    }

    /// The slice a device with `profile` gets when it seeks (a rotational
    /// disk): [`SLICE_LATENCY_TARGETS`] latency targets. The engine and the
    /// simulator both take it, so a disk is served in the same slices by both.
    pub fn default_slice_ns(profile: &DeviceProfile) -> Nanos {
        SLICE_LATENCY_TARGETS.saturating_mul(profile.latency_target_ns())
    }
}

/// A piece the dispatcher lets go to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchedPiece {
    /// Pass it to [`Dispatcher::complete`] when the device is done.
    pub token: u64,
    /// The request this piece belongs to.
    pub request: RequestId,
    /// Its class.
    pub class: ClassId,
    /// Read or write.
    pub direction: Direction,
    /// Where the piece starts.
    pub offset_bytes: u64,
    /// How long the piece is (at most `max_request_bytes`, or the device's
    /// piece alignment where that is larger).
    pub length_bytes: u64,
    /// Its cost in device time.
    pub cost_ns: Nanos,
    /// How long it waited in the fair queue.
    pub queue_wait_ns: Nanos,
}

/// A request whose last piece completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The caller's id.
    pub request: RequestId,
    /// Its class.
    pub class: ClassId,
    /// When it was enqueued.
    pub enqueued_at: Nanos,
    /// When its last piece left the fair queue (its enqueue time if none
    /// did).
    pub last_dispatched_at: Nanos,
    /// Pieces it was split into.
    pub pieces: u32,
    /// Whether any of its pieces went to the device: false for a request
    /// [`Dispatcher::cancel_queued`] dropped whole, which the device never
    /// saw.
    pub dispatched: bool,
}

/// A queued piece that [`Dispatcher::cancel_queued`] dropped without
/// dispatching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelledPiece {
    /// The request this piece belongs to.
    pub request: RequestId,
    /// Where the piece starts.
    pub offset_bytes: u64,
    /// How long the piece is.
    pub length_bytes: u64,
    /// The request's completion when this was its last piece (none of the
    /// request is left queued or in flight); `None` while pieces of it are
    /// still queued after this one or in flight (those complete as usual).
    pub finished: Option<Completion>,
}

/// Counters of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// The class's shares.
    pub shares: u32,
    /// Pieces waiting in the fair queue.
    pub queued_pieces: usize,
    /// Pieces at the device.
    pub in_flight_pieces: usize,
    /// Pieces dispatched since the class was created.
    pub dispatched_pieces: u64,
    /// Requests completed since the class was created.
    pub completed_requests: u64,
    /// Device time (cost) dispatched since the class was created.
    pub dispatched_cost_ns: Nanos,
    /// Whether the class is being removed.
    pub retiring: bool,
    /// The class's rate limit, if any.
    pub rate_limit: Option<RateLimit>,
    /// Whether the class is held now by its rate limit (in debt).
    pub rate_limited: bool,
    /// How many times faster than charged the device serves the class, in
    /// thousandths, on a device with slices (see [`crate::pace`]);
    /// [`fair_queue::PACE_UNIT`] (one) elsewhere and until a tenth of a
    /// slice is seen.
    pub pace_per_mille: u64,
}

/// Counters of the whole device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatcherStats {
    /// The current budget.
    pub budget_ns: Nanos,
    /// Cost in flight now.
    pub in_flight_ns: Nanos,
    /// Pieces in flight now.
    pub in_flight_pieces: usize,
    /// Pieces waiting in the fair queue.
    pub queued_pieces: usize,
    /// Times a latency controller changed the budget.
    pub budget_changes: u64,
    /// The latency controller's decisions (grows, shrinks, holds, last situation).
    pub controller: ControllerStats,
}

#[derive(Debug)]
struct ClassSlot {
    generation: u32,
    live: bool,
    retiring: bool,
    in_flight_pieces: usize,
    in_flight_ns: Nanos,
    completed_requests: u64,
    dispatched_pieces: u64,
    /// The class's token buckets, if it has a rate limit.
    limiter: Option<ClassLimiter>,
    /// Where its outstanding streams end, reads then writes, on a device
    /// that seeks.
    streams: [StreamEnds; 2],
    /// How fast the device serves its charged cost, on a device with
    /// slices (see [`crate::pace`]).
    pace: Pace,
}

#[derive(Debug)]
struct RequestSlot {
    id: RequestId,
    class: ClassId,
    direction: Direction,
    enqueued_at: Nanos,
    last_dispatched_at: Nanos,
    pieces: u32,
    pieces_remaining: u32,
    /// Whether a piece of it was dispatched (its operation is charged then).
    started: bool,
    /// Where it ends, if it is recorded as a stream's end (on a device that
    /// streams, with bytes to move; see [`crate::streams`]).
    stream_end: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct QueuedPiece {
    request_slot: u32,
    offset_bytes: u64,
    length_bytes: u64,
    /// Whether it continues a sequential stream on a device that seeks, so
    /// costs only its transfer (see [`crate::streams`]).
    continues: bool,
}

#[derive(Clone, Copy, Debug)]
struct InFlightPiece {
    generation: u32,
    occupied: bool,
    request_slot: u32,
    cost_ns: Nanos,
    dispatched_at: Nanos,
    queue_wait_ns: Nanos,
    ahead_ns: Nanos,
    ahead_other_ns: Nanos,
    class_backlogged: bool,
    /// The dispatcher's completed cost when the piece was dispatched.
    completed_before_ns: u128,
    /// When the piece becomes overdue, if the controller says.
    overdue_at: Option<Nanos>,
    /// How long after its dispatch the controller calls it overdue.
    overdue_after_ns: Option<Nanos>,
    /// A read dispatched while no other class had work in flight, none
    /// having been dispatched since: it is not overdue yet (see
    /// `end_alone_exemption`).
    alone: bool,
}

impl InFlightPiece {
    /// Whether this slot still holds the piece dispatched with `generation`
    /// (not completed, not reused since).
    fn holds(&self, generation: u32) -> bool {
        self.occupied && self.generation == generation
    }
}

fn direction_index(direction: Direction) -> usize {
    match direction {
        Direction::Read => 0,
        Direction::Write => 1,
    }
}

/// A vector of reusable slots with a free list.
#[derive(Debug)]
struct Slab<T> {
    slots: Vec<T>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores a value, reusing a free slot; `fill` receives the slot's old value
    /// (for generation counters) or `None` for a new slot.
    fn insert_with(&mut self, fill: impl FnOnce(Option<&T>) -> T) -> u32 {
        match self.free.pop() {
            Some(index) => {
                let slot = &mut self.slots[index as usize];
                *slot = fill(Some(slot));
                index
            }
            None => {
                let index = u32::try_from(self.slots.len()).expect("more than 2^32 slots");
                self.slots.push(fill(None));
                index
            }
        }
    }

    fn release(&mut self, index: u32) {
        self.free.push(index);
    }

    fn live_count(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// What admits a piece in one [`Dispatcher::dispatch`] call.
#[derive(Clone, Copy, Debug)]
struct Admission {
    /// The oldest piece in flight is overdue: only the progress rule admits.
    overdue: bool,
    /// The quiet-reads rule's factor on the budget's limit.
    limit_factor: u64,
    /// [`DispatcherConfig::spare_latency_classes`].
    spare_latency_classes: bool,
}

/// The classes that take turns in a slice ([`Dispatcher::slice_round`]).
#[derive(Clone, Copy, Debug, Default)]
struct SliceRound {
    /// How many classes take turns.
    classes: u128,
    /// Their shares, summed.
    shares_sum: u128,
}

impl SliceRound {
    /// How much of its own device time a class with `shares` may run ahead
    /// of the head in a slice of `slice_ns` (its *turn*): its shares' part
    /// of a round of one slice per class in the round. Every class in the
    /// round then runs ahead by the same virtual time, so turns take device
    /// time in proportion to shares and a round lasts the slice times the
    /// classes, whatever the ratio of their shares: a class with few shares
    /// gets short turns, not long waits, and the disk seeks between regions
    /// once per slice on average, as with equal shares.
    fn turn_ns(self, slice_ns: Nanos, shares: u32) -> Nanos {
        let shares = u128::from(shares);
        let turn = u128::from(slice_ns) * self.classes.max(1) * shares
            / self.shares_sum.max(shares).max(1);
        Nanos::try_from(turn).unwrap_or(Nanos::MAX)
    }
}

/// What a running slice gives [`Dispatcher::dispatch`] next.
enum SlicePop {
    /// A piece (its class, cost and piece).
    Piece((usize, Nanos, QueuedPiece)),
    /// Nothing of the slice: the queue's own order decides.
    InOrder,
    /// Nothing goes until the next completion.
    Stop,
}

/// Whether a class whose work queued and in flight costs `demand_ns` has a
/// backlog in the sense of slices, `threshold_ns` being
/// [`Dispatcher::slice_backlog_threshold_ns`]. A class with nothing queued
/// or in flight has none even when the threshold is 0 (a slice of 0 or 1
/// ns): as a running slice it would hold the device for work that never
/// comes.
fn is_slice_backlog(demand_ns: Nanos, threshold_ns: Nanos) -> bool {
    demand_ns > 0 && demand_ns >= threshold_ns
}

/// Whether a piece of `cost_ns` of class `index`, which has `queued_ns`
/// queued, may go: the progress rule (nothing of the class in flight), or,
/// while the oldest piece is not overdue, room in the budget: room beside
/// the other classes' work alone for a latency class (less than the budget
/// queued and in flight) where [`DispatcherConfig::spare_latency_classes`]
/// says so.
fn admits(
    classes: &Slab<ClassSlot>,
    budget: &Budget,
    admission: Admission,
    index: usize,
    cost_ns: Nanos,
    queued_ns: Nanos,
) -> bool {
    let slot = &classes.slots[index];
    if slot.in_flight_pieces == 0 {
        return true;
    }
    if admission.overdue {
        return false;
    }
    let demand_ns = queued_ns.saturating_add(slot.in_flight_ns);
    if admission.spare_latency_classes && demand_ns < budget.limit_ns() {
        // A latency class: only the other classes' work counts against it.
        let others_ns = budget.in_flight_ns().saturating_sub(slot.in_flight_ns);
        let limit_ns = budget.limit_ns().saturating_mul(admission.limit_factor);
        return others_ns.saturating_add(cost_ns) <= limit_ns;
    }
    budget.admits_scaled(cost_ns, admission.limit_factor)
}

/// What a piece of `length_bytes` costs: its transfer alone if it continues
/// a stream on a device that seeks (see [`crate::streams`]), else the full
/// cost.
fn piece_cost_ns(
    cost_model: &CostModel,
    direction: Direction,
    length_bytes: u64,
    continues: bool,
) -> Nanos {
    if continues {
        cost_model.transfer_ns(direction, length_bytes)
    } else {
        cost_model.cost_ns(direction, length_bytes)
    }
}

/// One device's dispatcher; see the module docs.
pub struct Dispatcher<C: LatencyController = FixedBudget> {
    profile: DeviceProfile,
    cost_model: CostModel,
    budget: Budget,
    /// Split size for reads and writes, derived from the budget.
    split_bytes: [u64; 2],
    /// Split size for reads and writes during a quiet (see
    /// [`crate::quiet_reads`]), derived from the budget it admits then.
    quiet_split_bytes: [u64; 2],
    controller: C,
    budget_changes: u64,
    queue: FairQueue<QueuedPiece>,
    classes: Slab<ClassSlot>,
    requests: Slab<RequestSlot>,
    in_flight: Slab<InFlightPiece>,
    /// In-flight pieces as (slot, generation) in dispatch order; completed ones
    /// are dropped lazily from the front, so the front is the oldest in flight,
    /// and all at once when they outnumber the live ones (an old piece that
    /// stays at the device keeps the front from moving).
    dispatch_order: VecDeque<(u32, u32)>,
    /// Cost completed since the dispatcher was made (for `overtaken_ns`).
    completed_ns: u128,
    /// Indexes of the classes held by their rate limit.
    held_classes: Vec<usize>,
    /// In-flight reads dispatched alone (see `InFlightPiece::alone`), all of
    /// the class `alone_class`.
    alone_pieces: usize,
    alone_class: usize,
    /// The slice's length, if the device is rotational (see
    /// [`DispatcherConfig::slice_ns`]).
    slice_ns: Option<Nanos>,
    /// Pieces of the split size one budget holds while reads come (see
    /// [`DispatcherConfig::pipeline_pieces`]).
    pipeline_pieces: u64,
    /// [`DispatcherConfig::spare_latency_classes`].
    spare_latency_classes: bool,
    /// What split sizes are multiples of
    /// ([`DispatcherConfig::piece_alignment_bytes`]).
    piece_alignment_bytes: u64,
    /// Whether pieces that continue a stream cost only their transfer
    /// ([`DispatcherConfig::seeks`]).
    seeks: bool,
    /// The class served last: the one whose slice runs.
    slice_class: Option<usize>,
    /// Where the service time of the next completion starts, for each
    /// class's pace (see [`crate::pace`]).
    service_clock: ServiceClock,
    /// Read requests outstanding and the last read's time, for the
    /// quiet-reads rule.
    reads: ReadWatch,
}

impl<C: LatencyController> fmt::Debug for Dispatcher<C> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Dispatcher")
            .field("profile", &self.profile)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Dispatcher<FixedBudget> {
    /// A dispatcher whose budget stays what the profile (or config) sets.
    pub fn new(config: DispatcherConfig) -> Result<Self, CoreError> {
        Self::with_controller(config, FixedBudget)
    }
}

impl<C: LatencyController> Dispatcher<C> {
    /// A dispatcher whose budget `controller` may resize.
    pub fn with_controller(config: DispatcherConfig, controller: C) -> Result<Self, CoreError> {
        config.profile.validate()?;
        let cost_model = CostModel::new(&config.profile);
        let limit_ns = config.budget_ns.unwrap_or_else(|| {
            controller.start_limit_ns(Budget::derived_limit_ns(
                config.profile.latency_target_ns(),
                cost_model.small_request_cost_ns(),
            ))
        });
        let budget = Budget::new(limit_ns);
        let mut dispatcher = Self {
            profile: config.profile,
            cost_model,
            budget,
            split_bytes: [0; 2],
            quiet_split_bytes: [0; 2],
            controller,
            budget_changes: 0,
            queue: FairQueue::new(budget.limit_ns()),
            classes: Slab::new(),
            requests: Slab::new(),
            in_flight: Slab::new(),
            dispatch_order: VecDeque::new(),
            completed_ns: 0,
            held_classes: Vec::new(),
            alone_pieces: 0,
            alone_class: 0,
            slice_ns: config.slice_ns,
            pipeline_pieces: config.pipeline_pieces.max(1),
            spare_latency_classes: config.spare_latency_classes,
            piece_alignment_bytes: config.piece_alignment_bytes,
            seeks: config.seeks,
            slice_class: None,
            service_clock: ServiceClock::default(),
            reads: ReadWatch::new(config.quiet_reads),
        };
        dispatcher.derive_split_bytes();
        Ok(dispatcher)
    }

    fn derive_split_bytes(&mut self) {
        let limit_ns = self.budget.limit_ns();
        let quiet_limit_ns = limit_ns.saturating_mul(self.reads.quiet_limit_factor());
        for direction in [Direction::Read, Direction::Write] {
            let split = |limit_ns, pieces| {
                budget::split_bytes_aligned(
                    limit_ns,
                    pieces,
                    self.profile.max_request_bytes,
                    self.piece_alignment_bytes,
                    |bytes| self.cost_model.cost_ns(direction, bytes),
                )
            };
            self.split_bytes[direction_index(direction)] = split(limit_ns, self.pipeline_pieces);
            self.quiet_split_bytes[direction_index(direction)] =
                split(quiet_limit_ns, budget::PIPELINE_PIECES);
        }
    }

    /// The size pieces of `direction` are split to while reads come.
    pub fn split_bytes(&self, direction: Direction) -> u64 {
        self.split_bytes[direction_index(direction)]
    }

    /// The size pieces of `direction` are split to when the dispatcher
    /// admits `limit_factor` budgets (see [`crate::quiet_reads`]).
    fn split_bytes_at(&self, direction: Direction, limit_factor: u64) -> u64 {
        if limit_factor > 1 {
            self.quiet_split_bytes[direction_index(direction)]
        } else {
            self.split_bytes(direction)
        }
    }

    /// The profile this dispatcher was built with.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    /// The slice classes with a backlog are served in
    /// ([`DispatcherConfig::slice_ns`]); `None`: strictly by virtual time.
    pub fn slice_ns(&self) -> Option<Nanos> {
        self.slice_ns
    }

    /// Whether the device seeks, so that pieces continuing a stream cost
    /// only their transfer ([`DispatcherConfig::seeks`]).
    pub fn seeks(&self) -> bool {
        self.seeks
    }

    /// The cost model in use.
    pub fn cost_model(&self) -> &CostModel {
        &self.cost_model
    }

    /// The budget now.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Raises what split sizes are multiples of to `alignment_bytes` (see
    /// [`DispatcherConfig::piece_alignment_bytes`]), for a file on the device
    /// that needs more than those before it; a smaller value changes
    /// nothing, since larger pieces stay aligned for every file before.
    pub fn raise_piece_alignment(&mut self, alignment_bytes: u64) {
        if alignment_bytes > self.piece_alignment_bytes {
            self.piece_alignment_bytes = alignment_bytes;
            self.derive_split_bytes();
        }
    }

    /// Sets the budget limit (the hook for latency controllers driven from
    /// outside). The wake credit and the split size follow the budget; pieces
    /// already queued at a larger split size are cut to the new one as they
    /// reach the head of the queue.
    pub fn set_budget_ns(&mut self, limit_ns: Nanos) {
        self.budget.resize(limit_ns);
        self.queue.set_credit_ns(self.budget.limit_ns());
        self.derive_split_bytes();
        self.budget_changes += 1;
    }

    /// The largest cost one piece can have now: the split size of the more
    /// expensive direction, during a quiet if the quiet-reads rule is on.
    /// Used by the wait bound.
    pub fn max_piece_cost_ns(&self) -> Nanos {
        let limit_factor = self.reads.quiet_limit_factor();
        [Direction::Read, Direction::Write]
            .into_iter()
            .map(|direction| {
                self.cost_model
                    .cost_ns(direction, self.split_bytes_at(direction, limit_factor))
            })
            .max()
            .expect("two directions")
    }

    /// The most cost that can be in flight ahead of a class's piece while
    /// `other_classes` exist: the limit (times the quiet-reads factor, if the
    /// rule is on) plus one piece per other class that went by the progress
    /// rule (see [`crate::budget`]).
    pub fn in_flight_bound_ns(&self, other_classes: usize) -> Nanos {
        let limit_ns = self.budget.limit_ns();
        // Saturating: the budget and slice are caller-given (`u64::MAX` is a
        // budget without a bound), and a bound of `Nanos::MAX` says as much.
        limit_ns
            .saturating_mul(self.reads.quiet_limit_factor())
            .saturating_add((other_classes as Nanos).saturating_mul(self.max_piece_cost_ns()))
    }

    /// The longest a backlogged `class` waits between dispatches, with the
    /// classes that exist now and the current budget; see [`crate::fair_queue`],
    /// whose bound is applied with the in-flight work that may be ahead of the
    /// class ([`Dispatcher::in_flight_bound_ns`]), not the bare limit.
    pub fn gap_bound_ns(&self, class: ClassId) -> Result<Nanos, CoreError> {
        self.check_class(class)?;
        let shares = self.queue.shares(class.index());
        let others: Vec<u32> = self
            .live_classes()
            .filter(|other| *other != class)
            .map(|other| self.queue.shares(other.index()))
            .collect();
        // A turn in a slice lets a class run ahead by up to its turn of its
        // own device time more, as the wake credit does.
        let credit = self
            .budget
            .limit_ns()
            .saturating_add(self.longest_turn_ns());
        Ok(fair_queue::gap_bound_ns(
            shares,
            &others,
            self.in_flight_bound_ns(others.len()),
            self.max_piece_cost_ns(),
            credit,
        ))
    }

    /// The longest turn of a slice ([`SliceRound::turn_ns`]) any class
    /// that exists now could get, whichever of them have a backlog: the
    /// class with the most shares beside some number of those with the
    /// fewest (at least the slice; 0 without slices).
    fn longest_turn_ns(&self) -> Nanos {
        let Some(slice_ns) = self.slice_ns else {
            return 0;
        };
        let mut shares: Vec<u32> = self
            .live_classes()
            .map(|class| self.queue.shares(class.index()))
            .collect();
        shares.sort_unstable();
        let Some((&most, fewest_first)) = shares.split_last() else {
            return slice_ns;
        };
        let mut round = SliceRound {
            classes: 1,
            shares_sum: u128::from(most),
        };
        let mut longest = slice_ns;
        for &other in fewest_first {
            round.classes += 1;
            round.shares_sum += u128::from(other);
            longest = longest.max(round.turn_ns(slice_ns, most));
        }
        longest
    }

    /// Adds a class with `shares` (1..=10000).
    pub fn add_class(&mut self, shares: u32) -> Result<ClassId, CoreError> {
        if !(SHARES_MIN..=SHARES_MAX).contains(&shares) {
            return Err(CoreError::InvalidShares(shares));
        }
        let index = self.classes.insert_with(|old| ClassSlot {
            generation: old.map_or(0, |slot| slot.generation.wrapping_add(1)),
            live: true,
            retiring: false,
            in_flight_pieces: 0,
            in_flight_ns: 0,
            completed_requests: 0,
            dispatched_pieces: 0,
            limiter: None,
            streams: [StreamEnds::default(); 2],
            pace: Pace::default(),
        });
        self.queue.add_class(index as usize, shares);
        Ok(ClassId {
            index,
            generation: self.classes.slots[index as usize].generation,
        })
    }

    /// Changes a class's shares; they apply to everything dispatched from now on.
    pub fn set_shares(&mut self, class: ClassId, shares: u32) -> Result<(), CoreError> {
        self.check_class(class)?;
        if !(SHARES_MIN..=SHARES_MAX).contains(&shares) {
            return Err(CoreError::InvalidShares(shares));
        }
        self.queue.set_shares(class.index(), shares);
        Ok(())
    }

    /// Sets (`Some`) or lifts (`None`) a class's rate limit at `now`; it
    /// applies to everything dispatched from now on. Changing a limit keeps
    /// the debt the class owes (see [`ClassLimiter::set_limit`]); lifting it
    /// releases the class at once.
    pub fn set_rate_limit(
        &mut self,
        now: Nanos,
        class: ClassId,
        limit: Option<RateLimit>,
    ) -> Result<(), CoreError> {
        self.check_class(class)?;
        if let Some(limit) = &limit {
            limit.validate()?;
        }
        let index = class.index();
        let slot = &mut self.classes.slots[index];
        slot.limiter = match (slot.limiter.take(), limit) {
            (_, None) => None,
            (Some(mut limiter), Some(limit)) => {
                limiter.set_limit(now, limit);
                Some(limiter)
            }
            (None, Some(limit)) => Some(ClassLimiter::new(now, limit)),
        };
        let eligible = slot
            .limiter
            .as_mut()
            .is_none_or(|limiter| limiter.is_eligible(now));
        if eligible {
            self.release_class(index);
        } else {
            self.hold_class(index);
        }
        Ok(())
    }

    /// A class's rate limit, if it has one.
    pub fn rate_limit(&self, class: ClassId) -> Result<Option<RateLimit>, CoreError> {
        self.check_class(class)?;
        Ok(self.classes.slots[class.index()]
            .limiter
            .map(|limiter| limiter.limit()))
    }

    /// When the first class held by its rate limit *with queued work* may go
    /// again: an engine with nothing else to wake it must call
    /// [`Dispatcher::dispatch`] then. `None` when no queued work waits on a
    /// rate limit.
    pub fn next_eligible_at(&self) -> Option<Nanos> {
        self.held_classes
            .iter()
            .filter(|&&index| self.queue.class_len(index) > 0)
            .filter_map(|&index| self.classes.slots[index].limiter)
            .map(|limiter| limiter.eligible_at())
            .min()
    }

    fn hold_class(&mut self, index: usize) {
        if !self.queue.is_held(index) {
            self.queue.hold(index);
            self.held_classes.push(index);
        }
    }

    fn release_class(&mut self, index: usize) {
        if self.queue.is_held(index) {
            self.queue.release(index);
            self.held_classes.retain(|&held| held != index);
        }
    }

    /// Releases every held class whose debt is paid at `now`.
    fn release_paid_classes(&mut self, now: Nanos) {
        let mut position = 0;
        while position < self.held_classes.len() {
            let index = self.held_classes[position];
            let limiter = self.classes.slots[index].limiter.as_mut();
            if limiter.is_none_or(|limiter| limiter.is_eligible(now)) {
                self.queue.release(index);
                self.held_classes.swap_remove(position);
            } else {
                position += 1;
            }
        }
    }

    /// Charges a dispatched piece to its class's rate limit, and holds the
    /// class if that left it in debt.
    fn charge_rate_limit(&mut self, now: Nanos, index: usize, bytes: u64, starts_request: bool) {
        let Some(limiter) = self.classes.slots[index].limiter.as_mut() else {
            return;
        };
        limiter.charge(now, bytes, starts_request);
        if !limiter.is_eligible(now) {
            self.hold_class(index);
        }
    }

    /// Removes a class. With nothing queued or in flight it goes at once;
    /// otherwise it is retired: it takes no new requests, and goes when its last
    /// piece completes. Returns whether it is gone already.
    pub fn remove_class(&mut self, class: ClassId) -> Result<bool, CoreError> {
        self.check_class(class)?;
        self.classes.slots[class.index()].retiring = true;
        Ok(self.free_class_if_idle(class.index()))
    }

    /// The live (and retiring) classes.
    pub fn live_classes(&self) -> impl Iterator<Item = ClassId> + '_ {
        self.classes
            .slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.live)
            .map(|(index, slot)| ClassId {
                index: index as u32,
                generation: slot.generation,
            })
    }

    fn check_class(&self, class: ClassId) -> Result<(), CoreError> {
        match self.classes.slots.get(class.index()) {
            Some(slot) if slot.live && slot.generation == class.generation => Ok(()),
            _ => Err(CoreError::UnknownClass(class)),
        }
    }

    fn free_class_if_idle(&mut self, index: usize) -> bool {
        let slot = &self.classes.slots[index];
        let idle = slot.in_flight_pieces == 0 && self.queue.class_len(index) == 0;
        if slot.retiring && idle {
            self.classes.slots[index].live = false;
            self.classes.slots[index].limiter = None;
            self.held_classes.retain(|&held| held != index);
            self.queue.remove_class(index);
            self.classes.release(index as u32);
            return true;
        }
        false
    }

    /// Queues a request at `now`, split into pieces of the split size now
    /// ([`Dispatcher::split_bytes`]; a write's larger one during a quiet).
    /// Returns the number of pieces.
    pub fn enqueue(&mut self, now: Nanos, request: IoRequest) -> Result<u32, CoreError> {
        self.check_class(request.class)?;
        if self.classes.slots[request.class.index()].retiring {
            return Err(CoreError::Retiring(request.class));
        }
        if request
            .offset_bytes
            .checked_add(request.length_bytes)
            .is_none()
        {
            return Err(CoreError::RequestOutOfRange {
                offset_bytes: request.offset_bytes,
                length_bytes: request.length_bytes,
            });
        }
        // A read ends a quiet, so only writes are split to its larger size.
        let limit_factor = match request.direction {
            Direction::Read => 1,
            Direction::Write => self.reads.limit_factor(now),
        };
        let max_bytes = self.split_bytes_at(request.direction, limit_factor);
        let pieces = request.length_bytes.div_ceil(max_bytes).max(1);
        let pieces = u32::try_from(pieces).map_err(|_| CoreError::TooManyPieces {
            length_bytes: request.length_bytes,
            split_bytes: max_bytes,
        })?;
        let request_slot = self.requests.insert_with(|_| RequestSlot {
            id: request.id,
            class: request.class,
            direction: request.direction,
            enqueued_at: now,
            last_dispatched_at: now,
            pieces,
            pieces_remaining: pieces,
            started: false,
            stream_end: None,
        });
        let mut offset_bytes = request.offset_bytes;
        let mut remaining_bytes = request.length_bytes;
        // On a device that streams, the pieces after the first continue it,
        // and the first continues a stream if it starts where an outstanding
        // request of its class ends.
        let streams = self.streams_pipelined(request.direction) && request.length_bytes > 0;
        let mut continues = streams && self.record_stream(request_slot, &request);
        for _ in 0..pieces {
            let length_bytes = remaining_bytes.min(max_bytes);
            let cost_ns = self.piece_cost_ns(request.direction, length_bytes, continues);
            let piece = QueuedPiece {
                request_slot,
                offset_bytes,
                length_bytes,
                continues,
            };
            continues = streams;
            self.queue.push(request.class.index(), cost_ns, piece);
            offset_bytes += length_bytes;
            remaining_bytes -= length_bytes;
        }
        if request.direction == Direction::Read {
            self.reads.queued(now);
        }
        Ok(pieces)
    }

    /// What a piece of `length_bytes` costs here (see [`piece_cost_ns`]).
    fn piece_cost_ns(&self, direction: Direction, length_bytes: u64, continues: bool) -> Nanos {
        piece_cost_ns(&self.cost_model, direction, length_bytes, continues)
    }

    /// Whether pieces of `direction` that continue a stream go to the device
    /// while the one before is still there, so pay no seek (see
    /// [`crate::streams`]): on a device that seeks, while the budget holds
    /// two pieces of the split size at their transfer cost.
    fn streams_pipelined(&self, direction: Direction) -> bool {
        if !self.seeks {
            return false;
        }
        let transfer_ns = self
            .cost_model
            .transfer_ns(direction, self.split_bytes(direction));
        transfer_ns.saturating_mul(budget::PIPELINE_PIECES) <= self.budget.limit_ns()
    }

    /// Records `request` (in `request_slot`) as its class's stream end in
    /// its direction; returns whether it continues a stream.
    fn record_stream(&mut self, request_slot: u32, request: &IoRequest) -> bool {
        let end_bytes = request.offset_bytes + request.length_bytes;
        self.requests.slots[request_slot as usize].stream_end = Some(end_bytes);
        self.classes.slots[request.class.index()].streams[direction_index(request.direction)]
            .record(request.offset_bytes, end_bytes)
    }

    /// The request in `request_slot`, about to be released, is done: a
    /// request starting where it ends no longer continues its stream.
    fn stream_finished(&mut self, request_slot: u32) {
        let request = &self.requests.slots[request_slot as usize];
        if let Some(end_bytes) = request.stream_end {
            let direction = direction_index(request.direction);
            self.classes.slots[request.class.index()].streams[direction].finished(end_bytes);
        }
    }

    /// Moves every piece the budget admits now into `out`, in fair-queue order,
    /// skipping classes held by their rate limit. Returns how many it moved.
    pub fn dispatch(&mut self, now: Nanos, out: &mut Vec<DispatchedPiece>) -> usize {
        let mut moved = 0;
        let overdue = self.oldest_is_overdue(now);
        let limit_factor = self.reads.limit_factor(now);
        if !self.held_classes.is_empty() {
            self.release_paid_classes(now);
        }
        self.cut_head_to_split_size(limit_factor);
        let admission = Admission {
            overdue,
            limit_factor,
            spare_latency_classes: self.spare_latency_classes,
        };
        // The round of turns, once it is needed: a dispatch moves work from
        // queued to in flight, which leaves each class's backlog as it was.
        let mut round = None;
        while let Some((class_index, cost_ns)) = self.queue.peek() {
            let in_slice = match self.running_slice(class_index, &mut round) {
                Some((slice_class, turn_ns)) => {
                    self.cut_front_to_split_size(slice_class, limit_factor);
                    self.pop_in_slice(slice_class, turn_ns, admission)
                }
                None => SlicePop::InOrder,
            };
            let popped = match in_slice {
                SlicePop::Piece(popped) => Some(popped),
                SlicePop::InOrder => self.pop_in_order(class_index, cost_ns, admission),
                SlicePop::Stop => None,
            };
            let Some((class_index, cost_ns, piece)) = popped else {
                break;
            };
            self.slice_class = Some(class_index);
            let request = &mut self.requests.slots[piece.request_slot as usize];
            let starts_request = !std::mem::replace(&mut request.started, true);
            self.charge_rate_limit(now, class_index, piece.length_bytes, starts_request);
            out.push(self.start_piece(now, class_index, cost_ns, piece));
            moved += 1;
            self.cut_head_to_split_size(limit_factor);
        }
        moved
    }

    /// Whether a piece of `cost_ns` of class `index` may go now: the progress
    /// rule (nothing of the class in flight), or room in the budget while the
    /// oldest piece is not overdue.
    fn may_go(&self, index: usize, cost_ns: Nanos, admission: Admission) -> bool {
        let queued_ns = self.queue.queued_ns(index);
        admits(
            &self.classes,
            &self.budget,
            admission,
            index,
            cost_ns,
            queued_ns,
        )
    }

    /// The next piece in virtual-time order, with no slice running: the
    /// head's if it may go, else a small piece that bypasses it.
    fn pop_in_order(
        &mut self,
        head_class: usize,
        head_cost_ns: Nanos,
        admission: Admission,
    ) -> Option<(usize, Nanos, QueuedPiece)> {
        if self.may_go(head_class, head_cost_ns, admission) {
            return self.queue.pop();
        }
        // The head waits for room. A small piece that fits now, of a class
        // with less than a budget queued (one whose latency the budget
        // protects, not a backlog), need not wait behind it (see
        // `fair_queue`).
        let backlog_ns = self.budget.limit_ns();
        let (classes, budget) = (&self.classes, &self.budget);
        self.queue.pop_bypassing(|index, cost_ns, queued_ns| {
            queued_ns < backlog_ns
                && cost_ns.saturating_mul(BYPASS_COST_RATIO) <= head_cost_ns
                && admits(classes, budget, admission, index, cost_ns, queued_ns)
        })
    }

    /// The next piece while `slice_class` runs its turn of `turn_ns` beside
    /// the backlogged head (see [`DispatcherConfig::slice_ns`]). A latency
    /// class (less than a slice backlog queued and in flight) goes first, up
    /// to the whole slice plus its wake credit of its own device time ahead
    /// of the waiting head, so a slice never delays it; then the slice's
    /// class, if its next piece lies within its turn (else the queue's order). While
    /// the slice's class has all of its work at the device, or no room for
    /// its next piece, nothing else goes: its completions bring the next,
    /// which the other backlog's region must not get ahead of.
    fn pop_in_slice(
        &mut self,
        slice_class: usize,
        turn_ns: Nanos,
        admission: Admission,
    ) -> SlicePop {
        let threshold_ns = self.slice_backlog_threshold_ns();
        let lead_ns = self
            .slice_ns
            .unwrap_or(0)
            .saturating_add(self.budget.limit_ns());
        let (classes, budget) = (&self.classes, &self.budget);
        let latency = self
            .queue
            .pop_bypassing_within(lead_ns, |index, cost_ns, queued_ns| {
                index != slice_class
                    && !is_slice_backlog(
                        queued_ns.saturating_add(classes.slots[index].in_flight_ns),
                        threshold_ns,
                    )
                    && admits(classes, budget, admission, index, cost_ns, queued_ns)
            });
        if let Some(popped) = latency {
            return SlicePop::Piece(popped);
        }
        let Some(slice_cost_ns) = self.queue.front_cost_ns(slice_class) else {
            return SlicePop::Stop;
        };
        if !self.may_go(slice_class, slice_cost_ns, admission) {
            return SlicePop::Stop;
        }
        match self.queue.pop_class_within(slice_class, turn_ns) {
            Some(popped) => SlicePop::Piece(popped),
            None => SlicePop::InOrder,
        }
    }

    /// The demand (queued and in flight) from which a class has a backlog
    /// in the sense of slices: the budget, or [`SLICE_BACKLOG_FRACTION`] of
    /// the slice when the budget is larger (0 without slices).
    fn slice_backlog_threshold_ns(&self) -> Nanos {
        let slice_ns = self.slice_ns.unwrap_or(0);
        self.budget
            .limit_ns()
            .min((slice_ns as f64 * SLICE_BACKLOG_FRACTION) as Nanos)
    }

    /// Where the slice stands, with `head_class` at the head of the fair
    /// queue (see [`DispatcherConfig::slice_ns`]). Slices apply only on a
    /// rotational device, between two classes with a backlog (a budget or
    /// more queued and in flight), the class served last and the head class;
    /// a class asking for less is a latency class, which a slice never
    /// delays and which never holds the device for itself. The
    /// slice runs while the class served last is within its turn
    /// ([`SliceRound::turn_ns`]) of the head class; `round` holds the round
    /// once worked out. Returns the slice's class and its turn, in its own
    /// device time.
    fn running_slice(
        &self,
        head_class: usize,
        round: &mut Option<SliceRound>,
    ) -> Option<(usize, Nanos)> {
        let (slice_ns, slice_class) = (self.slice_ns?, self.slice_class?);
        if slice_class == head_class
            || !self.has_slice_backlog(head_class, 0)
            || !self.has_slice_backlog(slice_class, 0)
        {
            return None;
        }
        let round = round.get_or_insert_with(|| self.slice_round());
        let turn_ns = round.turn_ns(slice_ns, self.queue.shares(slice_class));
        self.queue
            .is_within_lead(slice_class, turn_ns)
            .then_some((slice_class, turn_ns))
    }

    /// The classes that take turns in a slice now: those with a backlog,
    /// less any held by its rate limit (it takes no turns).
    fn slice_round(&self) -> SliceRound {
        (0..self.classes.slots.len())
            .filter(|&index| !self.queue.is_held(index) && self.has_slice_backlog(index, 0))
            .fold(SliceRound::default(), |round, index| SliceRound {
                classes: round.classes + 1,
                shares_sum: round.shares_sum + u128::from(self.queue.shares(index)),
            })
    }

    /// Whether `class_index`, with `extra_ns` more of its work, has a backlog
    /// in the sense of slices: on a rotational device, its work queued and in
    /// flight reaches the budget, or [`SLICE_BACKLOG_FRACTION`] of the slice
    /// when the budget is larger. Always `false` without slices.
    fn has_slice_backlog(&self, class_index: usize, extra_ns: Nanos) -> bool {
        if self.slice_ns.is_none() {
            return false;
        }
        let demand_ns = self.queue.queued_ns(class_index)
            + self.classes.slots[class_index].in_flight_ns
            + extra_ns;
        is_slice_backlog(demand_ns, self.slice_backlog_threshold_ns())
    }

    /// Cuts the next piece to the current split size if it was split at a larger
    /// one (its request was queued under a larger budget). Two pieces of the old
    /// size may not fit the smaller budget, so the device would get them one at a
    /// time: a disk then loses a revolution per piece, for as long as the queue
    /// holds such pieces (a deep writer's queue: hundreds of milliseconds).
    fn cut_head_to_split_size(&mut self, limit_factor: u64) {
        if let Some((class_index, _, _)) = self.queue.peek_item() {
            self.cut_front_to_split_size(class_index, limit_factor);
        }
    }

    /// [`Dispatcher::cut_head_to_split_size`] for the next piece of
    /// `class_index`, head of the queue or not (a running slice's class).
    fn cut_front_to_split_size(&mut self, class_index: usize, limit_factor: u64) {
        let Some(piece) = self.queue.front_item(class_index) else {
            return;
        };
        let piece = *piece;
        let request = &self.requests.slots[piece.request_slot as usize];
        let direction = request.direction;
        let split_bytes = self.split_bytes_at(direction, limit_factor);
        if piece.length_bytes <= split_bytes {
            return;
        }
        let (cost_model, streams) = (self.cost_model, self.streams_pipelined(direction));
        self.queue.split_front(class_index, |_, piece| {
            let first = QueuedPiece {
                length_bytes: split_bytes,
                ..piece
            };
            let rest = QueuedPiece {
                offset_bytes: piece.offset_bytes + split_bytes,
                length_bytes: piece.length_bytes - split_bytes,
                continues: streams,
                ..piece
            };
            let cost = |piece: &QueuedPiece| {
                piece_cost_ns(&cost_model, direction, piece.length_bytes, piece.continues)
            };
            ((cost(&first), first), (cost(&rest), rest))
        });
        let request = &mut self.requests.slots[piece.request_slot as usize];
        request.pieces += 1;
        request.pieces_remaining += 1;
    }

    /// Whether the oldest piece in flight is overdue at `now`; drops completed
    /// pieces from the front of the dispatch order on the way.
    fn oldest_is_overdue(&mut self, now: Nanos) -> bool {
        while let Some(&(slot, generation)) = self.dispatch_order.front() {
            let piece = &self.in_flight.slots[slot as usize];
            if piece.holds(generation) {
                return piece.overdue_at.is_some_and(|at| now >= at);
            }
            self.dispatch_order.pop_front();
        }
        false
    }

    /// Whether a class dispatching a piece of `cost_ns` asks for more than it
    /// gets: at least a budget of its own work still waits behind the piece,
    /// it has a backlog in the sense of slices (on a rotational device only),
    /// or some of its work waits while the class, with this piece, holds at least half its
    /// shares' part of the budget (among the classes with work queued or in
    /// flight). Such a class waits for itself more than for anyone else. Half:
    /// the fair queue dispatches a class just when it holds less than its
    /// part, so the whole part would flip the verdict piece by piece.
    fn class_backlogged(&self, class_index: usize, cost_ns: Nanos) -> bool {
        let queued_ns = self.queue.queued_ns(class_index);
        let limit_ns = self.budget.limit_ns();
        if queued_ns >= limit_ns || self.has_slice_backlog(class_index, cost_ns) {
            return true;
        }
        if queued_ns == 0 {
            return false;
        }
        let active_shares: u64 = self
            .classes
            .slots
            .iter()
            .enumerate()
            .filter(|&(index, slot)| {
                slot.live
                    && (index == class_index
                        || slot.in_flight_pieces > 0
                        || self.queue.class_len(index) > 0)
            })
            .map(|(index, _)| u64::from(self.queue.shares(index)))
            .sum();
        let own_ns = self.classes.slots[class_index].in_flight_ns + cost_ns;
        let shares = u64::from(self.queue.shares(class_index));
        2 * u128::from(own_ns) * u128::from(active_shares)
            >= u128::from(limit_ns) * u128::from(shares)
    }

    /// Another class's piece goes to the device: every read dispatched alone
    /// becomes overdue as if dispatched `now`, so that the newer work cannot
    /// starve it.
    fn end_alone_exemption(&mut self, now: Nanos) {
        for &(slot, generation) in &self.dispatch_order {
            let piece = &mut self.in_flight.slots[slot as usize];
            if piece.holds(generation) && piece.alone {
                piece.alone = false;
                piece.overdue_at = piece
                    .overdue_after_ns
                    .map(|after_ns| now.saturating_add(after_ns));
            }
        }
        self.alone_pieces = 0;
    }

    /// When a piece dispatched `now` becomes overdue. A read dispatched
    /// while no other class has work in flight (`alone`) is overtaken only
    /// by its own class's work, which stopping newer work would not help: it
    /// is not overdue until another class's piece is dispatched behind it. (A
    /// write keeps its watchdog: a disk that skips one piece of a stream
    /// starves it, and the reads that come later wait behind it.)
    fn watch_overdue(
        &mut self,
        now: Nanos,
        class_index: usize,
        alone: bool,
        overdue_after_ns: Option<Nanos>,
    ) -> Option<Nanos> {
        if self.alone_pieces > 0 && self.alone_class != class_index {
            self.end_alone_exemption(now);
        }
        if alone {
            self.alone_pieces += 1;
            self.alone_class = class_index;
            return None;
        }
        overdue_after_ns.map(|after_ns| now.saturating_add(after_ns))
    }

    fn start_piece(
        &mut self,
        now: Nanos,
        class_index: usize,
        cost_ns: Nanos,
        piece: QueuedPiece,
    ) -> DispatchedPiece {
        let ahead_ns = self.budget.in_flight_ns();
        let ahead_other_ns = ahead_ns - self.classes.slots[class_index].in_flight_ns;
        let class_backlogged = self.class_backlogged(class_index, cost_ns);
        let direction = self.requests.slots[piece.request_slot as usize].direction;
        // A read of a backlogged class is served after its own class's queue
        // anyway: the device reordering it starves no one the target protects.
        let overdue_after_ns = if class_backlogged && direction == Direction::Read {
            None
        } else {
            self.controller
                .overdue_after_ns(direction, ahead_ns, cost_ns)
        };
        let alone =
            direction == Direction::Read && ahead_other_ns == 0 && overdue_after_ns.is_some();
        let overdue_at = self.watch_overdue(now, class_index, alone, overdue_after_ns);
        if self.slice_ns.is_some() {
            self.service_clock
                .dispatched(now, self.in_flight.live_count() == 0);
        }
        self.budget.take(cost_ns);
        let request = &mut self.requests.slots[piece.request_slot as usize];
        request.last_dispatched_at = now;
        let queue_wait_ns = now.saturating_sub(request.enqueued_at);
        let (request_id, class, direction) = (request.id, request.class, request.direction);
        debug_assert_eq!(class.index(), class_index);
        let class_slot = &mut self.classes.slots[class_index];
        class_slot.in_flight_pieces += 1;
        class_slot.in_flight_ns += cost_ns;
        class_slot.dispatched_pieces += 1;
        let slot = self.in_flight.insert_with(|old| InFlightPiece {
            generation: old.map_or(0, |slot| slot.generation.wrapping_add(1)),
            occupied: true,
            request_slot: piece.request_slot,
            cost_ns,
            dispatched_at: now,
            queue_wait_ns,
            ahead_ns,
            ahead_other_ns,
            class_backlogged,
            completed_before_ns: self.completed_ns,
            overdue_at,
            overdue_after_ns,
            alone,
        });
        let generation = self.in_flight.slots[slot as usize].generation;
        self.dispatch_order.push_back((slot, generation));
        if self.dispatch_order.len() > 2 * self.in_flight.live_count() + DISPATCH_ORDER_SLACK {
            let in_flight = &self.in_flight;
            self.dispatch_order
                .retain(|&(slot, generation)| in_flight.slots[slot as usize].holds(generation));
        }
        DispatchedPiece {
            token: (u64::from(generation) << 32) | u64::from(slot),
            request: request_id,
            class,
            direction,
            offset_bytes: piece.offset_bytes,
            length_bytes: piece.length_bytes,
            cost_ns,
            queue_wait_ns,
        }
    }

    /// The device finished the piece with `token` at `now`. Returns the request's
    /// completion when this was its last piece.
    pub fn complete(&mut self, now: Nanos, token: u64) -> Result<Option<Completion>, CoreError> {
        let slot_index = (token & u64::from(u32::MAX)) as u32;
        let generation = (token >> 32) as u32;
        let piece = match self.in_flight.slots.get(slot_index as usize) {
            Some(piece) if piece.holds(generation) => *piece,
            _ => return Err(CoreError::UnknownToken(token)),
        };
        self.in_flight.slots[slot_index as usize].occupied = false;
        self.in_flight.release(slot_index);
        if let Some(slice_ns) = self.slice_ns {
            let served_ns = self.service_clock.completed(now);
            let index = self.requests.slots[piece.request_slot as usize]
                .class
                .index();
            let pace = &mut self.classes.slots[index].pace;
            pace.record(piece.cost_ns, served_ns, slice_ns);
            self.queue
                .set_pace_per_mille(index, pace.per_mille(slice_ns));
        }
        if piece.alone {
            self.alone_pieces -= 1;
        }
        let request = &self.requests.slots[piece.request_slot as usize];
        let completed_since_ns = self.completed_ns - piece.completed_before_ns;
        let overtaken_ns = completed_since_ns.saturating_sub(u128::from(piece.ahead_ns));
        self.completed_ns += u128::from(piece.cost_ns);
        let sample = CompletionSample {
            now,
            direction: request.direction,
            cost_ns: piece.cost_ns,
            device_time_ns: now.saturating_sub(piece.dispatched_at),
            queue_wait_ns: piece.queue_wait_ns,
            in_flight_ns: self.budget.in_flight_ns(),
            ahead_ns: piece.ahead_ns,
            ahead_other_ns: piece.ahead_other_ns,
            class_backlogged: piece.class_backlogged,
            queued_pieces: self.queued_for_budget(),
            runner_up_in_flight_pieces: self.runner_up_in_flight_pieces(),
            overtaken_ns: Nanos::try_from(overtaken_ns).unwrap_or(Nanos::MAX),
        };
        self.budget.release(piece.cost_ns);
        if let Some(limit_ns) = self
            .controller
            .on_completion(&sample, self.budget.limit_ns())
        {
            self.set_budget_ns(limit_ns);
        }
        let completion = self.finish_piece(piece.request_slot, piece.cost_ns);
        if sample.direction == Direction::Read {
            self.reads.served(now, completion.is_some());
        }
        Ok(completion)
    }

    /// Pieces in the fair queue that wait for the budget: all of them but
    /// those of classes held by their rate limit, which wait for their
    /// tokens and would wait just as long under any budget.
    fn queued_for_budget(&self) -> usize {
        let held: usize = self
            .held_classes
            .iter()
            .map(|&index| self.queue.class_len(index))
            .sum();
        self.queue.len() - held
    }

    /// The second largest number of pieces a class has in flight (see
    /// [`CompletionSample::runner_up_in_flight_pieces`]).
    fn runner_up_in_flight_pieces(&self) -> usize {
        let (mut first, mut second) = (0, 0);
        for slot in self.classes.slots.iter().filter(|slot| slot.live) {
            if slot.in_flight_pieces > first {
                second = first;
                first = slot.in_flight_pieces;
            } else if slot.in_flight_pieces > second {
                second = slot.in_flight_pieces;
            }
        }
        second
    }

    fn finish_piece(&mut self, request_slot: u32, cost_ns: Nanos) -> Option<Completion> {
        let request = &mut self.requests.slots[request_slot as usize];
        request.pieces_remaining -= 1;
        let class_index = request.class.index();
        let class_slot = &mut self.classes.slots[class_index];
        class_slot.in_flight_pieces -= 1;
        class_slot.in_flight_ns -= cost_ns;
        let completion = if request.pieces_remaining == 0 {
            let completion = Completion {
                request: request.id,
                class: request.class,
                enqueued_at: request.enqueued_at,
                last_dispatched_at: request.last_dispatched_at,
                pieces: request.pieces,
                dispatched: true,
            };
            self.stream_finished(request_slot);
            self.requests.release(request_slot);
            self.classes.slots[class_index].completed_requests += 1;
            Some(completion)
        } else {
            None
        };
        self.free_class_if_idle(class_index);
        completion
    }

    /// Drops every queued piece without dispatching it (a shutdown that will
    /// not serve what waits), appending each to `out` in queue order, and
    /// returns how many it dropped. Pieces in flight are untouched: complete
    /// them as usual, and a request with one in flight comes back from
    /// [`Dispatcher::complete`] with its last. Each request still finishes
    /// exactly once: through the cancelled piece that was its last
    /// ([`CancelledPiece::finished`]) or through `complete`.
    pub fn cancel_queued(&mut self, out: &mut Vec<CancelledPiece>) -> usize {
        let mut dropped = 0;
        for class_index in 0..self.classes.slots.len() {
            if !self.classes.slots[class_index].live || self.queue.class_len(class_index) == 0 {
                continue;
            }
            for piece in self.queue.drain_class(class_index) {
                let request = &mut self.requests.slots[piece.request_slot as usize];
                request.pieces_remaining -= 1;
                if request.direction == Direction::Read && request.pieces_remaining == 0 {
                    self.reads.cancelled();
                }
                let id = request.id;
                let finished = (request.pieces_remaining == 0).then_some(Completion {
                    request: request.id,
                    class: request.class,
                    enqueued_at: request.enqueued_at,
                    last_dispatched_at: request.last_dispatched_at,
                    pieces: request.pieces,
                    dispatched: request.started,
                });
                if finished.is_some() {
                    self.stream_finished(piece.request_slot);
                    self.requests.release(piece.request_slot);
                    self.classes.slots[class_index].completed_requests += 1;
                }
                out.push(CancelledPiece {
                    request: id,
                    offset_bytes: piece.offset_bytes,
                    length_bytes: piece.length_bytes,
                    finished,
                });
                dropped += 1;
            }
            self.free_class_if_idle(class_index);
        }
        dropped
    }

    /// Counters of one class.
    pub fn class_stats(&self, class: ClassId) -> Result<ClassStats, CoreError> {
        self.check_class(class)?;
        let slot = &self.classes.slots[class.index()];
        Ok(ClassStats {
            shares: self.queue.shares(class.index()),
            queued_pieces: self.queue.class_len(class.index()),
            in_flight_pieces: slot.in_flight_pieces,
            dispatched_pieces: slot.dispatched_pieces,
            completed_requests: slot.completed_requests,
            dispatched_cost_ns: self.queue.charged_ns(class.index()),
            retiring: slot.retiring,
            rate_limit: slot.limiter.map(|limiter| limiter.limit()),
            rate_limited: self.queue.is_held(class.index()),
            pace_per_mille: self.queue.pace_per_mille(class.index()),
        })
    }

    /// Counters of the device.
    pub fn stats(&self) -> DispatcherStats {
        DispatcherStats {
            budget_ns: self.budget.limit_ns(),
            in_flight_ns: self.budget.in_flight_ns(),
            in_flight_pieces: self.in_flight.live_count(),
            queued_pieces: self.queue.len(),
            budget_changes: self.budget_changes,
            controller: self.controller.stats(),
        }
    }

    /// Whether pieces wait in the queue: when none do, [`Dispatcher::dispatch`]
    /// would move nothing, so a caller may skip it (and its clock read). Pieces
    /// of classes held by a rate limit count: they wait too.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether nothing is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.live_count() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{NANOS_PER_MICROSECOND, NANOS_PER_MILLISECOND, NANOS_PER_SECOND};

    use crate::profile::sata_ssd as profile;

    /// A disk-like profile: 200 IOPS and 150 MB/s each way (a command costs
    /// 5 ms, 128 KiB of transfer 0.87 ms), a 50 ms target.
    fn disk_profile() -> DeviceProfile {
        DeviceProfile {
            read_iops: 200.0,
            write_iops: 200.0,
            read_bandwidth: 150e6,
            write_bandwidth: 150e6,
            max_request_bytes: 1 << 20,
            latency_target_us: 50_000,
        }
    }

    /// The cost of each piece dispatched for a 4 KiB random read, then a
    /// sequential stream of three 128 KiB writes queued together (the second
    /// split in two), then a write behind the stream, then one that starts
    /// where the stream ended but only after it completed, on
    /// [`disk_profile`]. Each group is dispatched and completed before the
    /// next is queued.
    fn stream_costs(seeks: bool) -> Vec<(u64, Nanos)> {
        let mut config = DispatcherConfig::new(disk_profile());
        config.seeks = seeks;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        dispatcher.split_bytes[direction_index(Direction::Write)] = 128 << 10;
        let class = dispatcher.add_class(100).unwrap();
        let stream = 1 << 30;
        let groups: [&[(Direction, u64, u64)]; 4] = [
            &[(Direction::Read, 7 << 30, 4096)],
            &[
                (Direction::Write, stream, 128 << 10),
                (Direction::Write, stream + (128 << 10), 256 << 10),
                (Direction::Write, stream + (384 << 10), 128 << 10),
            ],
            &[(Direction::Write, stream, 128 << 10)],
            &[(Direction::Write, stream + (512 << 10), 128 << 10)],
        ];
        let (mut out, mut id) = (Vec::new(), 0);
        for group in groups {
            for &(direction, offset_bytes, length_bytes) in group {
                id += 1;
                let request = IoRequest {
                    id: RequestId(id),
                    class,
                    direction,
                    offset_bytes,
                    length_bytes,
                };
                dispatcher.enqueue(0, request).unwrap();
            }
            let done = out.len();
            while dispatcher.dispatch(0, &mut out) > 0 {}
            for piece in &out[done..] {
                dispatcher.complete(0, piece.token).unwrap();
            }
        }
        out.iter()
            .map(|piece| (piece.length_bytes, piece.cost_ns))
            .collect()
    }

    #[test]
    fn on_a_disk_a_piece_that_continues_a_stream_costs_only_its_transfer() {
        let (command_ns, transfer_ns) = (5_000_000, 873_814);
        assert_eq!(
            stream_costs(true),
            [
                (4096, command_ns),
                (128 << 10, command_ns),
                (128 << 10, transfer_ns),
                (128 << 10, transfer_ns),
                (128 << 10, transfer_ns),
                (128 << 10, command_ns),
                (128 << 10, command_ns),
            ],
            "a random read and a stream's first write pay the command; the rest of the \
             stream, split pieces included, its transfer; a write behind the stream seeks, \
             and so does one that reaches the disk after its predecessor completed"
        );
        assert!(
            stream_costs(false)
                .iter()
                .all(|&(_, cost_ns)| cost_ns == command_ns),
            "without seeks every piece pays the command"
        );
    }

    /// Two classes of equal shares with deep queues of 4 KiB random reads
    /// on [`disk_profile`], on a device that serves one piece at a time in
    /// dispatch order, the first class's pieces in a third of their cost
    /// (a region the disk reorders well), the second's in their cost, for
    /// 20 s. Returns the first class's part of the device's time and its
    /// pace in thousandths.
    fn time_split_by_pace(slice_ns: Option<Nanos>) -> (f64, u64) {
        let mut config = DispatcherConfig::new(disk_profile());
        config.seeks = true;
        config.slice_ns = slice_ns;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let classes = [100, 100].map(|shares| dispatcher.add_class(shares).unwrap());
        for id in 0..30_000 {
            let class = classes[(id % 2) as usize];
            dispatcher
                .enqueue(0, request(id, class, Direction::Read, 4096))
                .unwrap();
        }
        let (mut now, mut out, mut in_flight) = (0, Vec::new(), VecDeque::new());
        let mut device_ns = [0; 2];
        while now < 20 * NANOS_PER_SECOND {
            dispatcher.dispatch(now, &mut out);
            in_flight.extend(out.drain(..));
            let piece: DispatchedPiece = in_flight.pop_front().expect("backlogs keep it busy");
            let index = usize::from(piece.class != classes[0]);
            let served_ns = if index == 0 {
                piece.cost_ns / 3
            } else {
                piece.cost_ns
            };
            device_ns[index] += served_ns;
            now += served_ns;
            dispatcher.complete(now, piece.token).unwrap();
        }
        let pace = dispatcher.class_stats(classes[0]).unwrap().pace_per_mille;
        (
            device_ns[0] as f64 / (device_ns[0] + device_ns[1]) as f64,
            pace,
        )
    }

    #[test]
    fn on_a_disk_shares_split_the_time_the_disk_takes_not_the_cost_charged() {
        let (part, pace) = time_split_by_pace(Some(500 * NANOS_PER_MILLISECOND));
        assert!(
            (2_900..=3_100).contains(&pace),
            "the pace of a class served in a third of its cost: {pace}"
        );
        assert!(
            (part - 0.5).abs() < 0.05,
            "equal shares, equal time: {part:.3}"
        );
        let (part, pace) = time_split_by_pace(None);
        assert_eq!(pace, fair_queue::PACE_UNIT, "no pace without slices");
        assert!(
            (part - 0.25).abs() < 0.05,
            "by the cost charged, the faster class gets a quarter of the time: {part:.3}"
        );
    }

    #[test]
    fn flushes_and_the_other_direction_continue_no_stream() {
        let mut config = DispatcherConfig::new(disk_profile());
        config.seeks = true;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        let requests = [
            (Direction::Write, 0, 0),
            (Direction::Write, 0, 0),
            (Direction::Write, 0, 128 << 10),
            (Direction::Read, 128 << 10, 4096),
            (Direction::Write, 128 << 10, 128 << 10),
        ];
        for (id, (direction, offset_bytes, length_bytes)) in requests.into_iter().enumerate() {
            let request = IoRequest {
                id: RequestId(id as u64),
                class,
                direction,
                offset_bytes,
                length_bytes,
            };
            dispatcher.enqueue(0, request).unwrap();
        }
        let mut out = Vec::new();
        while dispatcher.dispatch(0, &mut out) > 0 {}
        let costs: Vec<Nanos> = out.iter().map(|piece| piece.cost_ns).collect();
        assert_eq!(
            costs,
            [5_000_000, 5_000_000, 5_000_000, 5_000_000, 873_814],
            "two flushes at 0, a write from 0 and a read at its end pay the command; \
             only the write that continues the write is charged its transfer"
        );
    }

    #[test]
    fn a_budget_too_small_to_pipeline_two_pieces_charges_streams_the_command() {
        let mut config = DispatcherConfig::new(disk_profile());
        config.seeks = true;
        config.budget_ns = Some(1_000);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        dispatcher
            .enqueue(0, request(1, class, Direction::Write, 64 << 10))
            .unwrap();
        let mut costs = Vec::new();
        let mut out = Vec::new();
        while !dispatcher.is_idle() {
            dispatcher.dispatch(0, &mut out);
            for piece in out.drain(..) {
                costs.push(piece.cost_ns);
                dispatcher.complete(0, piece.token).unwrap();
            }
        }
        assert_eq!(costs.len(), 16, "split to the smallest pieces");
        assert!(
            costs.iter().all(|&cost_ns| cost_ns == 5_000_000),
            "{costs:?}"
        );
    }

    #[test]
    fn pieces_keep_the_devices_alignment_on_a_small_budget() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(20 * NANOS_PER_MICROSECOND);
        config.piece_alignment_bytes = 16_384;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        dispatcher
            .enqueue(0, request(1, class, Direction::Write, 256 << 10))
            .unwrap();
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for now in 0..64 {
            dispatcher.dispatch(now, &mut out);
            for piece in out.drain(..) {
                assert_eq!(piece.offset_bytes % 16_384, 0, "{piece:?}");
                assert_eq!(piece.length_bytes % 16_384, 0, "{piece:?}");
                offsets.push(piece.offset_bytes);
                dispatcher.complete(now, piece.token).unwrap();
            }
        }
        assert!(offsets.len() > 1, "the write was split: {offsets:?}");
    }

    #[test]
    fn a_raised_alignment_takes_the_split_with_it_and_a_lower_one_does_not() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(20 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        assert_eq!(dispatcher.split_bytes(Direction::Write), 4_096);
        dispatcher.raise_piece_alignment(16_384);
        assert_eq!(dispatcher.split_bytes(Direction::Write), 16_384);
        dispatcher.raise_piece_alignment(8_192);
        assert_eq!(dispatcher.split_bytes(Direction::Write), 16_384);
    }

    #[test]
    fn bounds_saturate_under_the_largest_budget_and_slice() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(Nanos::MAX);
        config.slice_ns = Some(Nanos::MAX);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        dispatcher.add_class(100).unwrap();
        assert_eq!(dispatcher.in_flight_bound_ns(1), Nanos::MAX);
        assert_eq!(dispatcher.gap_bound_ns(class).unwrap(), Nanos::MAX);
    }

    fn request(id: u64, class: ClassId, direction: Direction, length_bytes: u64) -> IoRequest {
        IoRequest {
            id: RequestId(id),
            class,
            direction,
            offset_bytes: id * 1_048_576,
            length_bytes,
        }
    }

    /// Two backlogged classes (shares 100 and 300) of 4 KiB reads on a device
    /// that serves one piece at a time in dispatch order, and a third class
    /// that enqueues one read at the `first_read_at`th completion and, up to
    /// `reads` in all, another every `period`th completion after it once the
    /// last is done. Returns the classes in dispatch order (0, 1, 2) and the
    /// most completions any of the third class's reads waited for.
    fn serve_two_backlogs(
        slice_ns: Option<Nanos>,
        first_read_at: usize,
        reads: usize,
        period: usize,
    ) -> (Vec<usize>, usize) {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(200 * NANOS_PER_MICROSECOND);
        config.slice_ns = slice_ns;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let classes = [100, 300, 100].map(|shares| dispatcher.add_class(shares).unwrap());
        for id in 0..8000 {
            let class = classes[(id % 2) as usize];
            let request = request(id, class, Direction::Read, 4096);
            dispatcher.enqueue(0, request).unwrap();
        }
        let (mut order, mut in_flight) = (Vec::new(), VecDeque::new());
        let (mut now, mut out) = (0, Vec::new());
        let (mut next_read_at, mut issued, mut pending_since, mut waited_max) =
            (first_read_at, 0, None, 0);
        for completed in 0..4000 {
            if completed >= next_read_at && pending_since.is_none() && issued < reads {
                let read = request(10_000 + issued as u64, classes[2], Direction::Read, 4096);
                dispatcher.enqueue(now, read).unwrap();
                (issued, pending_since) = (issued + 1, Some(completed));
                next_read_at = completed + period;
            }
            dispatcher.dispatch(now, &mut out);
            for piece in out.drain(..) {
                order.push(piece.class.index());
                in_flight.push_back(piece);
            }
            let piece = in_flight
                .pop_front()
                .expect("a backlog keeps the device busy");
            if let Some(since) = pending_since.filter(|_| piece.class == classes[2]) {
                waited_max = waited_max.max(completed - since);
                pending_since = None;
            }
            now += piece.cost_ns;
            dispatcher.complete(now, piece.token).unwrap();
        }
        assert_eq!(issued, reads, "every read of the third class was made");
        (order, waited_max)
    }

    /// A dispatcher with a 1 ms budget, requests of up to 1 MiB and the
    /// quiet-reads rule `rule`, a write class with 64 writes of 1 MiB queued
    /// at 0, and a read class.
    fn writer_beside_a_read_class(rule: Option<QuietReads>) -> (Dispatcher, ClassId) {
        let mut config = DispatcherConfig::new(DeviceProfile {
            max_request_bytes: 1 << 20,
            ..profile()
        });
        config.budget_ns = Some(1_000 * NANOS_PER_MICROSECOND);
        config.quiet_reads = rule;
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let (writes, reads) = (
            dispatcher.add_class(100).unwrap(),
            dispatcher.add_class(400).unwrap(),
        );
        for id in 0..64 {
            let write = request(id, writes, Direction::Write, 1 << 20);
            dispatcher.enqueue(0, write).unwrap();
        }
        (dispatcher, reads)
    }

    #[test]
    fn one_piece_per_budget_splits_larger_and_keeps_one_piece_in_flight_beside_reads() {
        let mut config = DispatcherConfig::new(DeviceProfile {
            max_request_bytes: 1 << 20,
            ..profile()
        });
        config.budget_ns = Some(1_000 * NANOS_PER_MICROSECOND);
        let two = Dispatcher::new(config.clone()).unwrap();
        config.pipeline_pieces = 1;
        let mut one = Dispatcher::new(config).unwrap();
        let (pieces_of_two, piece_of_one) = (
            two.split_bytes(Direction::Write),
            one.split_bytes(Direction::Write),
        );
        assert_eq!(piece_of_one, 2 * pieces_of_two);
        let (writes, reads) = (one.add_class(100).unwrap(), one.add_class(400).unwrap());
        one.enqueue(0, request(0, writes, Direction::Write, 4 << 20))
            .unwrap();
        for id in 1..=4 {
            one.enqueue(0, request(id, reads, Direction::Read, 4096))
                .unwrap();
        }
        let mut out = Vec::new();
        one.dispatch(0, &mut out);
        let written: Vec<u64> = out
            .iter()
            .filter(|piece| piece.class == writes)
            .map(|piece| piece.length_bytes)
            .collect();
        assert_eq!(
            written,
            [piece_of_one],
            "one whole-budget piece beside the reads"
        );
        assert!(
            out.iter().any(|piece| piece.class == reads),
            "and the reads"
        );
    }

    #[test]
    fn writes_deepen_while_no_one_reads_and_a_read_ends_the_quiet_at_once() {
        let rule = QuietReads::default();
        let limit_ns = 1_000 * NANOS_PER_MICROSECOND;
        let (mut dispatcher, reads) = writer_beside_a_read_class(Some(rule));
        let (mut out, mut in_flight) = (Vec::new(), VecDeque::new());
        dispatcher.dispatch(0, &mut out);
        // 128 KiB pieces while reads come; 512 KiB in a quiet, as the four
        // budgets it admits split.
        assert_eq!(dispatcher.split_bytes(Direction::Write), 128 * 1024);
        assert!(out.iter().all(|piece| piece.length_bytes == 512 * 1024));
        let deep_ns = dispatcher.budget().in_flight_ns();
        assert!(
            deep_ns > 3 * limit_ns && deep_ns <= rule.limit_factor * limit_ns,
            "a quiet device holds up to {} budgets of writes, not {deep_ns} ns",
            rule.limit_factor
        );
        in_flight.extend(out.drain(..));
        // A read ends the quiet: it goes at once, and no write goes until
        // the work in flight has drained below one budget.
        let read = request(1_000, reads, Direction::Read, 4096);
        dispatcher.enqueue(10, read).unwrap();
        dispatcher.dispatch(10, &mut out);
        assert_eq!(out.len(), 1, "only the read goes");
        assert_eq!(out[0].class, reads);
        let read_token = out.pop().unwrap().token;
        let mut now = 10;
        loop {
            let piece = in_flight
                .pop_front()
                .expect("a write resumes before all drain");
            now += piece.cost_ns;
            dispatcher.complete(now, piece.token).unwrap();
            dispatcher.dispatch(now, &mut out);
            if !out.is_empty() {
                break;
            }
        }
        let resumed_ns = dispatcher.budget().in_flight_ns();
        assert!(
            resumed_ns <= limit_ns,
            "a write went beside the read with {resumed_ns} ns in flight"
        );
        assert!(
            out.iter().all(|piece| piece.length_bytes == 128 * 1024),
            "queued writes are cut back to the split size while reads come"
        );
        // The read done, the device is quiet again only after the quiet time.
        dispatcher.complete(now, read_token).unwrap();
        dispatcher.dispatch(now + rule.quiet_ns - 1, &mut out);
        assert!(dispatcher.budget().in_flight_ns() <= limit_ns);
        dispatcher.dispatch(now + rule.quiet_ns, &mut out);
        assert!(dispatcher.budget().in_flight_ns() > 3 * limit_ns);
    }

    #[test]
    fn a_read_cut_in_more_pieces_than_it_was_queued_in_still_ends_once() {
        let (mut dispatcher, reads) = writer_beside_a_read_class(Some(QuietReads::default()));
        let read = request(1_000, reads, Direction::Read, 1 << 20);
        assert_eq!(dispatcher.enqueue(0, read).unwrap(), 8, "128 KiB pieces");
        // A smaller budget cuts the read's queued pieces as they reach the head.
        dispatcher.set_budget_ns(200 * NANOS_PER_MICROSECOND);
        let (mut out, mut in_flight, mut now, mut served) = (Vec::new(), VecDeque::new(), 0, 0);
        loop {
            dispatcher.dispatch(now, &mut out);
            in_flight.extend(out.drain(..));
            let Some(piece) = in_flight.pop_front() else {
                break;
            };
            now += piece.cost_ns;
            served += usize::from(piece.class == reads);
            if let Some(completion) = dispatcher.complete(now, piece.token).unwrap() {
                if completion.class == reads {
                    break;
                }
            }
        }
        assert!(served > 8, "the read was cut into {served} pieces");
        let quiet_ns = QuietReads::default().quiet_ns;
        assert_eq!(
            dispatcher.reads.limit_factor(now + quiet_ns),
            4,
            "quiet again"
        );
    }

    #[test]
    fn without_the_rule_writes_keep_to_one_budget() {
        let (mut dispatcher, _) = writer_beside_a_read_class(None);
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        assert!(dispatcher.budget().in_flight_ns() <= 1_000 * NANOS_PER_MICROSECOND);
        assert!(!out.is_empty());
    }

    #[test]
    fn slices_serve_backlogs_in_runs_by_shares_and_never_delay_a_latency_class() {
        let switches = |order: &[usize]| order.windows(2).filter(|w| w[0] != w[1]).count();
        let (strict, strict_wait) = serve_two_backlogs(None, 500, 1, 1);
        let (sliced, sliced_wait) =
            serve_two_backlogs(Some(2 * 200 * NANOS_PER_MICROSECOND), 500, 1, 1);
        assert!(
            switches(&sliced) * 5 < switches(&strict),
            "{} switches with slices, {} without",
            switches(&sliced),
            switches(&strict)
        );
        for order in [&strict, &sliced] {
            let second = order.iter().filter(|&&class| class == 1).count() as f64;
            let part = second / order.iter().filter(|&&class| class != 2).count() as f64;
            assert!((part - 0.75).abs() < 0.02, "the second class's part {part}");
        }
        // The single read goes as soon as the budget has room, slice or not.
        assert!(
            sliced_wait <= strict_wait + 1,
            "{sliced_wait} vs {strict_wait}"
        );
    }

    /// A latency class that reads on through many slices, a read every few
    /// completions, gets ahead of the backlogged class that waits for the
    /// running slice in virtual time; a slice still holds it back no more
    /// than strict virtual-time order does.
    #[test]
    fn a_latency_class_reading_through_slices_waits_no_longer_than_without_them() {
        let slice_ns = 10 * 200 * NANOS_PER_MICROSECOND;
        let (_, strict_wait) = serve_two_backlogs(None, 100, 100, 10);
        let (_, sliced_wait) = serve_two_backlogs(Some(slice_ns), 100, 100, 10);
        assert!(
            sliced_wait <= strict_wait + 1,
            "a read waited {sliced_wait} completions with slices, {strict_wait} without"
        );
    }

    /// Records whether each completed piece's class was backlogged.
    struct BacklogRecorder(std::sync::Arc<std::sync::Mutex<Vec<bool>>>);

    impl LatencyController for BacklogRecorder {
        fn on_completion(&mut self, sample: &CompletionSample, _limit_ns: Nanos) -> Option<Nanos> {
            self.0.lock().unwrap().push(sample.class_backlogged);
            None
        }
    }

    /// Two closed-loop classes (shares 100 and 300) of `outstanding` 4 KiB
    /// reads each, as [`serve_closed_loops`] serves them for 8000 dispatches.
    fn serve_two_closed_loops(
        outstanding: u64,
        budget_pieces: u64,
        slice_pieces: u64,
    ) -> (Vec<usize>, Vec<bool>) {
        serve_closed_loops(&[100, 300], outstanding, budget_pieces, slice_pieces, 8000)
    }

    /// Closed-loop classes with `shares` of `outstanding` 4 KiB reads each,
    /// on a device that serves one piece at a time in dispatch order, with a
    /// budget of `budget_pieces` reads and a slice of `slice_pieces` reads,
    /// for `dispatches` pieces. Returns the classes in dispatch order and
    /// whether each completed piece's class counted as backlogged.
    fn serve_closed_loops(
        shares: &[u32],
        outstanding: u64,
        budget_pieces: u64,
        slice_pieces: u64,
        dispatches: usize,
    ) -> (Vec<usize>, Vec<bool>) {
        let read_ns = CostModel::new(&profile()).cost_ns(Direction::Read, 4096);
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(budget_pieces * read_ns);
        config.slice_ns = Some(slice_pieces * read_ns);
        let samples = std::sync::Arc::default();
        let recorder = BacklogRecorder(std::sync::Arc::clone(&samples));
        let mut dispatcher = Dispatcher::with_controller(config, recorder).unwrap();
        let mut next_id = 0;
        for &shares in shares {
            let class = dispatcher.add_class(shares).unwrap();
            for _ in 0..outstanding {
                dispatcher
                    .enqueue(0, request(next_id, class, Direction::Read, 4096))
                    .unwrap();
                next_id += 1;
            }
        }
        let (mut order, mut in_flight) = (Vec::new(), VecDeque::new());
        let (mut now, mut out) = (0, Vec::new());
        while order.len() < dispatches {
            dispatcher.dispatch(now, &mut out);
            for piece in out.drain(..) {
                order.push(piece.class.index());
                in_flight.push_back(piece);
            }
            let piece = in_flight
                .pop_front()
                .expect("the loops keep the device busy");
            now += piece.cost_ns;
            dispatcher.complete(now, piece.token).unwrap();
            let again = request(next_id, piece.class, Direction::Read, 4096);
            dispatcher.enqueue(now, again).unwrap();
            next_id += 1;
        }
        let backlogged = samples.lock().unwrap().clone();
        (order, backlogged)
    }

    /// The longest run of consecutive dispatches of `class` in `order`, and
    /// the most dispatches of other classes between two of its own.
    fn longest_turn_and_wait(order: &[usize], class: usize) -> (usize, usize) {
        let (mut turn, mut wait, mut run, mut since) = (0, 0, 0, 0);
        for &served in order {
            if served == class {
                (run, since) = (run + 1, 0);
            } else {
                (run, since) = (0, since + 1);
            }
            (turn, wait) = (turn.max(run), wait.max(since));
        }
        (turn, wait)
    }

    #[test]
    fn slice_turns_follow_shares_so_few_shares_mean_short_turns_not_long_waits() {
        // Backlogs deeper than the budget, a slice of 80 reads: a round of
        // turns is the slice per class, each class's turn its shares' part
        // of the round, and a turn that starts behind the next class may
        // run one turn past it, so at most twice that part, and what one read
        // of the class with the fewest shares is worth in its own reads.
        let slice_pieces = 80;
        for shares in [&[100, 200, 400][..], &[100, 10_000]] {
            let (order, _) = serve_closed_loops(shares, 80, 64, slice_pieces, 20_000);
            let round = slice_pieces as usize * shares.len();
            let total: u32 = shares.iter().sum();
            for (class, &class_shares) in shares.iter().enumerate() {
                let part =
                    order.iter().filter(|&&c| c == class).count() as f64 / order.len() as f64;
                let expected = f64::from(class_shares) / f64::from(total);
                assert!(
                    (part - expected).abs() < 0.1 * expected,
                    "{shares:?}: class {class}'s part {part}"
                );
                let (turn, wait) = longest_turn_and_wait(&order, class);
                // The class does run in turns of its part: not piece by
                // piece, nor in whole slices.
                let turn_min = round * class_shares as usize / total as usize;
                assert!(
                    turn >= turn_min,
                    "{shares:?}: class {class}'s turn of {turn}"
                );
                let fewest = *shares.iter().min().unwrap();
                let turn_max = 2 * round * class_shares as usize / total as usize
                    + (class_shares / fewest) as usize
                    + 2;
                assert!(
                    turn <= turn_max,
                    "{shares:?}: class {class}'s turn of {turn}"
                );
                // Whatever the shares, a class waits at most two rounds and
                // what one of its reads is worth in the others' reads (a turn
                // of the whole slice of its own device time would have made
                // the 100-share class wait a hundred slices beside the
                // 10000-share one).
                let read_worth = ((total - class_shares) / class_shares) as usize;
                assert!(
                    wait <= 2 * round + read_worth,
                    "{shares:?}: class {class} waited {wait}"
                );
            }
        }
    }

    #[test]
    fn a_slice_holds_while_its_class_has_everything_at_the_device() {
        // Each class keeps 40 reads outstanding; the budget holds 64, so a
        // class alone cannot fill it, but 40 reads are half the 80-read
        // slice: both classes have a backlog, and the other class's reads
        // must not fill the room the slice's class leaves.
        let (order, backlogged) = serve_two_closed_loops(40, 64, 80);
        let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
        let slices = order.len() / 80;
        assert!(
            switches <= 2 * slices,
            "{switches} switches in {} dispatches",
            order.len()
        );
        let part = order.iter().filter(|&&class| class == 1).count() as f64 / order.len() as f64;
        assert!((part - 0.75).abs() < 0.03, "the second class's part {part}");
        // Neither class is a latency class: their reads are not protected.
        let protected = backlogged.iter().filter(|&&backlogged| !backlogged).count();
        assert_eq!(protected, 0, "of {} completions", backlogged.len());
    }

    #[test]
    fn pieces_of_a_running_slice_are_cut_to_a_shrunk_split_size() {
        let mut config = DispatcherConfig::new(DeviceProfile {
            max_request_bytes: 1 << 20,
            ..profile()
        });
        config.budget_ns = Some(20_000 * NANOS_PER_MICROSECOND);
        config.slice_ns = Some(100_000 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let classes = [100, 100].map(|shares| dispatcher.add_class(shares).unwrap());
        for id in 0..64 {
            let class = classes[(id % 2) as usize];
            let write = request(id, class, Direction::Write, 1 << 20);
            dispatcher.enqueue(0, write).unwrap();
        }
        assert_eq!(dispatcher.split_bytes(Direction::Write), 1 << 20);
        let (mut now, mut out, mut in_flight) = (0, Vec::new(), VecDeque::new());
        dispatcher.dispatch(now, &mut out);
        in_flight.extend(out.drain(..));
        dispatcher.set_budget_ns(1_000 * NANOS_PER_MICROSECOND);
        let split_bytes = dispatcher.split_bytes(Direction::Write);
        assert!(split_bytes < 1 << 20);
        let mut after_shrink = Vec::new();
        while let Some(piece) = in_flight.pop_front() {
            now += piece.cost_ns;
            dispatcher.complete(now, piece.token).unwrap();
            dispatcher.dispatch(now, &mut out);
            after_shrink.extend(out.iter().map(|piece| piece.length_bytes));
            in_flight.extend(out.drain(..));
        }
        assert!(dispatcher.is_idle());
        let oversize = after_shrink
            .iter()
            .filter(|&&length| length > split_bytes)
            .count();
        assert_eq!(oversize, 0, "of {} pieces", after_shrink.len());
    }

    #[test]
    fn a_slice_of_zero_never_holds_the_device_for_an_idle_class() {
        for slice_ns in [0, 1] {
            let mut config = DispatcherConfig::new(profile());
            config.budget_ns = Some(600 * NANOS_PER_MICROSECOND);
            config.slice_ns = Some(slice_ns);
            let mut dispatcher = Dispatcher::new(config).unwrap();
            let (a, b) = (
                dispatcher.add_class(100).unwrap(),
                dispatcher.add_class(100).unwrap(),
            );
            let mut out = Vec::new();
            for id in 0..2 {
                dispatcher
                    .enqueue(0, request(id, b, Direction::Read, 4096))
                    .unwrap();
            }
            dispatcher.dispatch(0, &mut out);
            dispatcher
                .enqueue(1, request(2, b, Direction::Read, 4096))
                .unwrap();
            dispatcher
                .enqueue(1, request(3, a, Direction::Read, 4096))
                .unwrap();
            // Everything completes, whatever the order of service.
            let mut now = 1;
            let mut completed = 0;
            while !dispatcher.is_idle() {
                dispatcher.dispatch(now, &mut out);
                let piece = out
                    .pop()
                    .unwrap_or_else(|| panic!("slice {slice_ns}: nothing dispatched, work left"));
                now += piece.cost_ns;
                completed += usize::from(dispatcher.complete(now, piece.token).unwrap().is_some());
            }
            assert_eq!(completed, 4, "slice {slice_ns}");
        }
    }

    #[test]
    fn requests_past_the_largest_offset_or_of_too_many_pieces_are_refused() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        let mut past_the_end = request(1, class, Direction::Write, 4096);
        past_the_end.offset_bytes = u64::MAX - 10;
        assert!(matches!(
            dispatcher.enqueue(0, past_the_end),
            Err(CoreError::RequestOutOfRange { .. })
        ));
        let mut huge = request(2, class, Direction::Read, u64::MAX / 2);
        huge.offset_bytes = 0;
        let error = dispatcher.enqueue(0, huge).unwrap_err();
        assert!(matches!(error, CoreError::TooManyPieces { .. }), "{error}");
        assert!(dispatcher.is_idle(), "nothing queued");
        assert_eq!(
            dispatcher.enqueue(0, request(3, class, Direction::Read, 4096)),
            Ok(1)
        );
    }

    #[test]
    fn the_dispatch_order_stays_small_while_an_old_piece_stays_at_the_device() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        let mut out = Vec::new();
        dispatcher
            .enqueue(0, request(0, class, Direction::Write, 4096))
            .unwrap();
        dispatcher.dispatch(0, &mut out);
        let stalled = out.pop().expect("the first piece goes");
        let mut now = 0;
        for id in 1..10_000 {
            dispatcher
                .enqueue(now, request(id, class, Direction::Read, 4096))
                .unwrap();
            dispatcher.dispatch(now, &mut out);
            for piece in out.drain(..) {
                now += piece.cost_ns;
                dispatcher.complete(now, piece.token).unwrap();
            }
            assert!(
                dispatcher.dispatch_order.len() <= 2 * 2 + DISPATCH_ORDER_SLACK + 1,
                "{} entries after {id} requests",
                dispatcher.dispatch_order.len()
            );
        }
        dispatcher.complete(now, stalled.token).unwrap();
        assert!(dispatcher.is_idle());
    }

    #[test]
    fn a_large_request_is_split_and_rejoined() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(600 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        assert_eq!(dispatcher.split_bytes(Direction::Write), 131_072);
        let class = dispatcher.add_class(100).unwrap();
        let pieces = dispatcher
            .enqueue(0, request(1, class, Direction::Write, 1_048_576 + 4096))
            .unwrap();
        assert_eq!(pieces, 9);
        let mut completions = Vec::new();
        let mut now = 0;
        let mut offsets = Vec::new();
        while !dispatcher.is_idle() {
            let mut out = Vec::new();
            dispatcher.dispatch(now, &mut out);
            assert!(!out.is_empty(), "no progress");
            for piece in out {
                offsets.push((piece.offset_bytes, piece.length_bytes));
                now += piece.cost_ns;
                completions.extend(dispatcher.complete(now, piece.token).unwrap());
            }
        }
        assert_eq!(completions.len(), 1, "exactly one completion");
        assert_eq!(completions[0].pieces, 9);
        let base = 1_048_576;
        assert_eq!(offsets[0], (base, 131_072));
        assert_eq!(offsets[8], (base + 8 * 131_072, 4096));
    }

    #[test]
    fn dispatch_stops_at_the_budget_but_lets_a_lone_oversize_piece_go() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(10 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(1).unwrap();
        // 4 KiB writes cost 16.7 µs each, more than the whole budget, and cannot
        // be split further.
        assert_eq!(dispatcher.split_bytes(Direction::Write), 4096);
        for id in 0..3 {
            dispatcher
                .enqueue(0, request(id, class, Direction::Write, 4096))
                .unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(
            dispatcher.dispatch(0, &mut out),
            1,
            "one lone oversize piece"
        );
        assert_eq!(
            dispatcher.dispatch(0, &mut out),
            0,
            "nothing while it flies"
        );
        dispatcher.complete(10, out[0].token).unwrap();
        assert_eq!(dispatcher.dispatch(10, &mut out), 1);
    }

    /// A writer whose class is ahead in virtual time fills the budget with two
    /// 128 KiB pieces (291 µs each) beside one 4 KiB read (12.5 µs), and has
    /// more queued: its next piece is the head and waits for room. A second
    /// read arrives, of a class with a read in flight (so the progress rule
    /// does not apply).
    #[test]
    fn a_small_read_goes_past_a_write_waiting_for_room() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(630 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let writes = dispatcher.add_class(1_000).unwrap();
        let reads = dispatcher.add_class(1).unwrap();
        dispatcher
            .enqueue(0, request(1, reads, Direction::Read, 4096))
            .unwrap();
        dispatcher
            .enqueue(0, request(2, writes, Direction::Write, 8 * 131_072))
            .unwrap();
        let mut first = Vec::new();
        dispatcher.dispatch(0, &mut first);
        assert_eq!(first.len(), 3, "a read and two writes: {first:?}");
        let classes = |out: &[DispatchedPiece]| out.iter().map(|piece| piece.class).collect();
        dispatcher
            .enqueue(1, request(3, reads, Direction::Read, 4096))
            .unwrap();
        let mut out = Vec::new();
        dispatcher.dispatch(1, &mut out);
        let second: Vec<ClassId> = classes(&out);
        assert_eq!(second, vec![reads], "the read fits beside the writes");
        // The write kept its place: once a write completes it goes before
        // the read queued meanwhile.
        dispatcher
            .enqueue(2, request(4, reads, Direction::Read, 4096))
            .unwrap();
        let write = first.iter().find(|piece| piece.class == writes).unwrap();
        dispatcher.complete(3, write.token).unwrap();
        out.clear();
        dispatcher.dispatch(3, &mut out);
        let third: Vec<ClassId> = classes(&out);
        assert_eq!(third, vec![writes, reads]);
    }

    #[test]
    fn the_split_size_follows_the_budget() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        // 300 µs: two 64 KiB writes (145 µs each) fit, two 128 KiB ones do not.
        assert_eq!(dispatcher.split_bytes(Direction::Write), 65_536);
        dispatcher.set_budget_ns(2_000 * NANOS_PER_MICROSECOND);
        assert_eq!(dispatcher.split_bytes(Direction::Write), 131_072);
        assert_eq!(dispatcher.split_bytes(Direction::Read), 131_072);
    }

    #[test]
    fn double_completion_is_refused() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        let class = dispatcher.add_class(1).unwrap();
        dispatcher
            .enqueue(0, request(7, class, Direction::Read, 4096))
            .unwrap();
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        let token = out[0].token;
        assert!(dispatcher.complete(1, token).unwrap().is_some());
        assert_eq!(
            dispatcher.complete(2, token),
            Err(CoreError::UnknownToken(token))
        );
    }

    #[test]
    fn cancelling_drops_the_queue_and_each_request_finishes_once() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(600 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let class = dispatcher.add_class(100).unwrap();
        // Request 1 is split into 9 pieces, of which the budget admits some;
        // request 2 waits whole behind it.
        dispatcher
            .enqueue(0, request(1, class, Direction::Write, 1_048_576 + 4096))
            .unwrap();
        dispatcher
            .enqueue(0, request(2, class, Direction::Read, 4096))
            .unwrap();
        let mut started = Vec::new();
        dispatcher.dispatch(0, &mut started);
        assert!(!started.is_empty() && started.len() < 9, "{started:?}");
        let mut cancelled = Vec::new();
        let dropped = dispatcher.cancel_queued(&mut cancelled);
        assert_eq!(dropped, cancelled.len());
        assert_eq!(dropped, 9 - started.len() + 1);
        assert!(!dispatcher.has_queued());
        // Request 2 had nothing in flight: its only piece finishes it.
        let finished: Vec<_> = cancelled
            .iter()
            .filter_map(|piece| piece.finished)
            .collect();
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].request, RequestId(2));
        // Request 1's cancelled pieces leave it to its pieces in flight.
        assert!(cancelled
            .iter()
            .filter(|piece| piece.request == RequestId(1))
            .all(|piece| piece.finished.is_none()));
        let mut completions = Vec::new();
        for piece in &started {
            if let Some(done) = dispatcher.complete(1, piece.token).unwrap() {
                completions.push(done.request);
            }
        }
        assert_eq!(
            completions,
            [RequestId(1)],
            "the last piece in flight finishes it"
        );
        assert!(dispatcher.is_idle());
        assert_eq!(dispatcher.class_stats(class).unwrap().completed_requests, 2);
        // The dispatcher goes on serving new work.
        dispatcher
            .enqueue(2, request(3, class, Direction::Read, 4096))
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(dispatcher.dispatch(2, &mut out), 1);
    }

    #[test]
    fn a_removed_class_finishes_its_work_then_its_handle_goes_stale() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        let class = dispatcher.add_class(10).unwrap();
        dispatcher
            .enqueue(0, request(1, class, Direction::Read, 4096))
            .unwrap();
        assert_eq!(
            dispatcher.remove_class(class),
            Ok(false),
            "retired, not gone"
        );
        assert_eq!(
            dispatcher.enqueue(0, request(2, class, Direction::Read, 4096)),
            Err(CoreError::Retiring(class))
        );
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        assert!(dispatcher.complete(5, out[0].token).unwrap().is_some());
        assert_eq!(
            dispatcher.set_shares(class, 5),
            Err(CoreError::UnknownClass(class))
        );
        let reused = dispatcher.add_class(10).unwrap();
        assert_eq!(reused.index(), class.index(), "slot reused");
        assert_ne!(reused, class, "but the old handle stays stale");
    }

    #[test]
    fn shares_are_validated() {
        let mut dispatcher = Dispatcher::new(DispatcherConfig::new(profile())).unwrap();
        assert_eq!(dispatcher.add_class(0), Err(CoreError::InvalidShares(0)));
        assert_eq!(
            dispatcher.add_class(10_001),
            Err(CoreError::InvalidShares(10_001))
        );
        let class = dispatcher.add_class(10_000).unwrap();
        assert_eq!(
            dispatcher.set_shares(class, 0),
            Err(CoreError::InvalidShares(0))
        );
    }

    struct HalveOnce(bool);

    impl LatencyController for HalveOnce {
        fn on_completion(&mut self, _sample: &CompletionSample, limit_ns: Nanos) -> Option<Nanos> {
            (!std::mem::replace(&mut self.0, true)).then_some(limit_ns / 2)
        }
    }

    #[test]
    fn a_controller_resizes_the_budget_through_the_hook() {
        let mut dispatcher =
            Dispatcher::with_controller(DispatcherConfig::new(profile()), HalveOnce(false))
                .unwrap();
        let before = dispatcher.budget().limit_ns();
        let class = dispatcher.add_class(1).unwrap();
        dispatcher
            .enqueue(0, request(1, class, Direction::Read, 4096))
            .unwrap();
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        dispatcher.complete(100, out[0].token).unwrap();
        assert_eq!(dispatcher.budget().limit_ns(), before / 2);
        assert_eq!(dispatcher.stats().budget_changes, 1);
    }
    #[test]
    fn a_class_with_nothing_in_flight_passes_a_full_budget() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(300 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::new(config).unwrap();
        let reads = dispatcher.add_class(100).unwrap();
        let writes = dispatcher.add_class(100).unwrap();
        dispatcher
            .enqueue(0, request(1, writes, Direction::Write, 1_048_576))
            .unwrap();
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        assert!(
            dispatcher.budget().in_flight_ns() + 12_500 > 300_000,
            "budget full"
        );
        // The writes stall; a read arrives and goes at once, by the progress rule.
        for id in [2, 3] {
            dispatcher
                .enqueue(1, request(id, reads, Direction::Read, 4096))
                .unwrap();
        }
        out.clear();
        assert_eq!(dispatcher.dispatch(1, &mut out), 1, "one read, not two");
        assert_eq!(out[0].class, reads);
        assert!(dispatcher.stats().in_flight_ns > dispatcher.stats().budget_ns);
    }

    /// A dispatcher with a budget of 300 µs, sparing latency classes their
    /// own work or not.
    fn with_300_us_budget(spare_latency_classes: bool) -> Dispatcher {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(300 * NANOS_PER_MICROSECOND);
        config.spare_latency_classes = spare_latency_classes;
        Dispatcher::new(config).unwrap()
    }

    #[test]
    fn a_latency_class_spared_its_own_work_passes_a_budget_its_reads_fill() {
        for spare in [false, true] {
            let mut dispatcher = with_300_us_budget(spare);
            let reads = dispatcher.add_class(400).unwrap();
            let writes = dispatcher.add_class(100).unwrap();
            // 20 reads of 12.5 µs: 250 µs of the 300, less than a budget.
            for id in 0..20 {
                dispatcher
                    .enqueue(0, request(id, reads, Direction::Read, 4096))
                    .unwrap();
            }
            let mut out = Vec::new();
            assert_eq!(dispatcher.dispatch(0, &mut out), 20);
            // A write piece goes by the progress rule: the budget is full.
            dispatcher
                .enqueue(1, request(100, writes, Direction::Write, 1_048_576))
                .unwrap();
            let mut writes_out = Vec::new();
            assert_eq!(dispatcher.dispatch(1, &mut writes_out), 1);
            let write_ns = dispatcher.budget().in_flight_ns() - 250 * NANOS_PER_MICROSECOND;
            assert!(write_ns > 50 * NANOS_PER_MICROSECOND, "{write_ns}");
            // One read completes and the reader sends the next: its class's
            // 237.5 µs in flight and the write leave it no room, but the
            // write alone does.
            dispatcher.complete(2, out[0].token).unwrap();
            dispatcher
                .enqueue(3, request(21, reads, Direction::Read, 4096))
                .unwrap();
            let mut next = Vec::new();
            let went = dispatcher.dispatch(3, &mut next);
            assert_eq!(went, usize::from(spare), "spare_latency_classes = {spare}");
            assert!(next.iter().all(|piece| piece.class == reads));
        }
    }

    #[test]
    fn a_backlogged_class_is_not_spared_its_own_work() {
        let mut dispatcher = with_300_us_budget(true);
        let reads = dispatcher.add_class(400).unwrap();
        // 40 reads of 12.5 µs: 500 µs, more than a budget.
        for id in 0..40 {
            dispatcher
                .enqueue(0, request(id, reads, Direction::Read, 4096))
                .unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(dispatcher.dispatch(0, &mut out), 24, "a budget's worth");
        assert_eq!(
            dispatcher.budget().in_flight_ns(),
            300 * NANOS_PER_MICROSECOND
        );
    }

    /// Marks every piece overdue `after_ns` after its dispatch.
    struct OverdueAfter(Nanos);

    impl LatencyController for OverdueAfter {
        fn on_completion(&mut self, _sample: &CompletionSample, _limit_ns: Nanos) -> Option<Nanos> {
            None
        }

        fn overdue_after_ns(
            &self,
            _direction: Direction,
            _ahead_ns: Nanos,
            _cost_ns: Nanos,
        ) -> Option<Nanos> {
            Some(self.0)
        }
    }

    #[test]
    fn an_overdue_piece_stops_newer_work_until_it_completes() {
        let mut config = DispatcherConfig::new(profile());
        config.budget_ns = Some(1_000 * NANOS_PER_MICROSECOND);
        let mut dispatcher = Dispatcher::with_controller(config, OverdueAfter(500)).unwrap();
        // A third class keeps a read in flight throughout, dispatched first,
        // so it is the oldest piece in flight until the end.
        let other = dispatcher.add_class(100).unwrap();
        let reads = dispatcher.add_class(100).unwrap();
        let writes = dispatcher.add_class(100).unwrap();
        dispatcher
            .enqueue(0, request(1000, other, Direction::Read, 4096))
            .unwrap();
        for id in 0..20 {
            dispatcher
                .enqueue(0, request(id, writes, Direction::Write, 65_536))
                .unwrap();
        }
        let mut out = Vec::new();
        dispatcher.dispatch(0, &mut out);
        let mut from_zero: VecDeque<u64> = out
            .iter()
            .filter(|piece| piece.class == writes)
            .map(|piece| piece.token)
            .collect();
        let other_read = out.iter().find(|piece| piece.class == other).unwrap();
        from_zero.push_back(other_read.token);
        // Before anything is overdue, a completion lets the next write go.
        dispatcher
            .complete(400, from_zero.pop_front().unwrap())
            .unwrap();
        out.clear();
        assert_eq!(dispatcher.dispatch(400, &mut out), 1);
        // At 600 ns the pieces dispatched at 0 are overdue: completions free
        // room, but no newer write goes; a class with nothing in flight still may.
        dispatcher
            .enqueue(600, request(99, reads, Direction::Read, 4096))
            .unwrap();
        out.clear();
        assert_eq!(dispatcher.dispatch(600, &mut out), 1);
        assert_eq!(out[0].class, reads);
        while let Some(token) = from_zero.pop_front() {
            dispatcher.complete(600, token).unwrap();
            out.clear();
            let moved = dispatcher.dispatch(600, &mut out);
            // Once the last overdue piece completed, writes flow again.
            assert_eq!(moved > 0, from_zero.is_empty(), "{moved} moved");
        }
    }
}
