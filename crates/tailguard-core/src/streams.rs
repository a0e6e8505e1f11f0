//! Sequential streams on a device that seeks: which pieces pay no seek.
//!
//! The cost model charges every piece the larger of one command
//! (`1 / IOPS`) and its transfer (`bytes / bandwidth`). On a rotational disk
//! the command term is mostly the seek and the rotation that a random
//! request pays before its transfer starts; a request that begins where the
//! previous one of its stream ended pays neither, so there it costs only its
//! transfer. Charged the command term anyway, a stream of 128 KiB sequential
//! writes on a disk of 200 random IOPS and 150 MB/s costs five times its
//! device time, and a class of them beside a class of random reads gets a
//! fifth of what its shares give it.
//!
//! A disk streams only while the next piece reaches it before the current
//! one ends, though: one written after the previous completed loses a
//! revolution (seed 003), which costs as much as a seek. So on a device that
//! seeks ([`crate::DispatcherConfig::seeks`]), and while the budget holds two
//! pieces of the split size at their transfer cost (so that the next is
//! queued behind the current), the dispatcher charges transfer only for a
//! piece that *continues a stream*: the second and later pieces of a split
//! request (contiguous with the one before by construction), and the first
//! piece of a request that starts where an outstanding (queued or in
//! flight) request of its class and direction ends. Each class keeps, per
//! direction, the newest end of up to [`STREAM_ENDS`] streams: a
//! continuation moves its stream's end, a request that completes takes its
//! end out (`StreamEnds::finished`), and a new stream takes a free entry or
//! else the oldest stream's.
//! Several are kept because a class often holds several sequential streams
//! at once (a job with several writers, a log and its index), whose requests
//! interleave in its queue; that the disk may serve two of them alternately,
//! seeking between them, is not seen. A request without bytes (a flush) is
//! never a stream, nor continues one. The budget is looked at when a
//! request is queued: pieces queued as continuations keep their cost if it
//! shrinks later. Offsets are those the caller gives, which the engine takes
//! from files: a request in one file that happens to start where another
//! file's outstanding request ends is taken for a continuation (and takes
//! that stream's end, so the other file's next request pays the command).
//!
//! A device without seeks (an SSD) keeps the command term for every piece:
//! its per-command work is paid whatever the offset.

/// How many stream ends a class remembers per direction: the sequential
/// streams it may interleave and still have each recognised.
pub const STREAM_ENDS: usize = 8;

/// The ends of a class's outstanding streams in one direction.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StreamEnds {
    ends: [Option<u64>; STREAM_ENDS],
    /// Where a new stream's end goes when no entry is free (the oldest
    /// stream started).
    next: usize,
}

impl StreamEnds {
    /// Records a request of `offset_bytes`..`end_bytes`; returns whether it
    /// continues a remembered stream (it starts where one ended). A
    /// continuation moves that stream's end; anything else starts a stream,
    /// in a free entry or else in place of the oldest.
    pub(crate) fn record(&mut self, offset_bytes: u64, end_bytes: u64) -> bool {
        debug_assert!(offset_bytes < end_bytes, "an empty request is no stream");
        if let Some(slot) = self.ends.iter_mut().find(|end| **end == Some(offset_bytes)) {
            *slot = Some(end_bytes);
            return true;
        }
        if let Some(free) = self.ends.iter_mut().find(|end| end.is_none()) {
            *free = Some(end_bytes);
        } else {
            self.ends[self.next] = Some(end_bytes);
            self.next = (self.next + 1) % STREAM_ENDS;
        }
        false
    }

    /// A request ending at `end_bytes` completed: a request starting there
    /// now reaches a disk that has moved on, so it no longer continues a
    /// stream (unless a later request moved that stream's end already).
    pub(crate) fn finished(&mut self, end_bytes: u64) {
        if let Some(slot) = self.ends.iter_mut().find(|end| **end == Some(end_bytes)) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_starts_where_one_ended_continues_its_stream() {
        let mut ends = StreamEnds::default();
        assert!(!ends.record(0, 4096), "the first request starts a stream");
        assert!(ends.record(4096, 8192));
        assert!(ends.record(8192, 12288));
        assert!(
            !ends.record(4096, 8192),
            "a rewrite behind the stream is a seek"
        );
    }

    #[test]
    fn interleaved_streams_are_each_recognised_up_to_the_limit() {
        let mut ends = StreamEnds::default();
        let streams = STREAM_ENDS as u64;
        let start = |stream: u64| stream << 30;
        for stream in 0..streams {
            assert!(!ends.record(start(stream), start(stream) + 4096));
        }
        for round in 1..4 {
            for stream in 0..streams {
                let offset = start(stream) + round * 4096;
                assert!(
                    ends.record(offset, offset + 4096),
                    "stream {stream} round {round}"
                );
            }
        }
        // One stream more than remembered evicts the oldest one's end.
        assert!(!ends.record(start(streams), start(streams) + 4096));
        assert!(!ends.record(start(0) + 4 * 4096, start(0) + 5 * 4096));
    }

    #[test]
    fn a_new_stream_takes_a_finished_streams_entry_before_evicting_one() {
        let mut ends = StreamEnds::default();
        for stream in 0..STREAM_ENDS as u64 {
            ends.record(stream << 30, (stream << 30) + 4096);
        }
        ends.finished((5 << 30) + 4096);
        assert!(!ends.record(9 << 30, (9 << 30) + 4096));
        for stream in 0..STREAM_ENDS as u64 {
            let offset = (stream << 30) + 4096;
            assert_eq!(
                ends.record(offset, offset + 4096),
                stream != 5,
                "stream {stream}"
            );
        }
    }

    #[test]
    fn a_request_after_its_predecessor_completed_starts_a_stream() {
        let mut ends = StreamEnds::default();
        ends.record(0, 4096);
        ends.finished(4096);
        assert!(
            !ends.record(4096, 8192),
            "the predecessor is done: the disk moved on"
        );
        // Queued behind an outstanding predecessor, the next continues; the
        // predecessor's completion then finds its end moved and takes nothing.
        assert!(ends.record(8192, 12288));
        ends.finished(8192);
        assert!(ends.record(12288, 16384));
    }
}
