//! Aligned buffers for O_DIRECT (stub: to be written).

/// A heap buffer whose start and length are multiples of an alignment.
pub struct AlignedBuffer {}
