//! (stub: to be written)
pub struct Budget;
