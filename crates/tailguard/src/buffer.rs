//! Aligned buffers for `O_DIRECT`.
//!
//! Direct I/O bypasses the page cache, so the kernel transfers straight
//! between the device and the caller's memory, and the device's DMA rules
//! leak into the API: the buffer's address must be a multiple of the
//! device's memory alignment, and the file offset and length multiples of
//! its offset alignment (see [`crate::device::direct_io_alignment`]). A
//! `Vec<u8>` only guarantees an alignment of 1, so [`AlignedBuffer`] owns a
//! heap allocation made with an explicit [`Layout`] whose alignment the
//! caller chooses.
//!
//! The buffer remembers the layout it was allocated with and frees the
//! memory with exactly that layout, whatever happens to its visible length:
//! [`AlignedBuffer::truncate`] only shrinks the length that the slice views
//! show (after a short read, say) and never reallocates. A zero-length buffer
//! allocates nothing; it holds a dangling pointer whose address equals the
//! alignment, so even its address satisfies the alignment it promises. New
//! buffers are zeroed, so no stale heap contents can be written to disk.
//!
//! [`check_alignment`] validates a request before submission and explains,
//! in an [`Error`] of a `Misaligned*` [`ErrorKind`], which of the address,
//! offset or length is misaligned and what alignment the device needs, so the mistake is
//! reported by the engine rather than as a bare `EINVAL` from the kernel.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::device::DirectIoAlignment;
use crate::error::{Error, ErrorKind};

/// A zeroed heap buffer whose start address is a multiple of a chosen
/// alignment, for `O_DIRECT` reads and writes.
pub struct AlignedBuffer {
    /// Start of the allocation (or `alignment` as a dangling address when
    /// `capacity` is 0).
    ptr: NonNull<u8>,
    /// Visible length; at most `capacity`.
    len: usize,
    /// Size the allocation was made with; it is freed with this size.
    capacity: usize,
    /// Alignment the allocation was made with, a power of two.
    alignment: usize,
}

impl AlignedBuffer {
    /// A zeroed buffer of `len` bytes starting at a multiple of `alignment`,
    /// which must be a power of two (any, 1 included). `len` may be 0, in
    /// which case nothing is allocated.
    pub fn new(len: usize, alignment: usize) -> Result<Self, Error> {
        if !alignment.is_power_of_two() {
            return Err(Error::new(ErrorKind::AlignmentNotPowerOfTwo {
                alignment_bytes: alignment,
            }));
        }
        let layout = Layout::from_size_align(len, alignment).map_err(|_| {
            Error::new(ErrorKind::BufferTooLarge {
                length_bytes: len,
                alignment_bytes: alignment,
            })
        })?;
        if len == 0 {
            // A nonzero power of two used as an address is non-null and
            // aligned to itself; nothing is ever read through it.
            let ptr = NonNull::new(std::ptr::without_provenance_mut::<u8>(alignment))
                .expect("a power of two is never zero");
            return Ok(AlignedBuffer {
                ptr,
                len: 0,
                capacity: 0,
                alignment,
            });
        }
        // SAFETY: `layout` has a nonzero size (len > 0 was checked above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::new(ErrorKind::OutOfMemory {
                length_bytes: len,
                alignment_bytes: alignment,
            })
        })?;
        Ok(AlignedBuffer {
            ptr,
            len,
            capacity: len,
            alignment,
        })
    }

    /// An aligned copy of `data`.
    pub fn from_slice(data: &[u8], alignment: usize) -> Result<Self, Error> {
        let mut buf = AlignedBuffer::new(data.len(), alignment)?;
        buf.copy_from_slice(data);
        Ok(buf)
    }

    /// The visible length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the visible length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The length the buffer was allocated with: the most that
    /// [`AlignedBuffer::restore_len`] gives back.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Undoes every [`AlignedBuffer::truncate`]: the visible length becomes
    /// the allocated length again (after a short read, to reuse the buffer
    /// for a full one). The bytes past the old length are whatever the buffer
    /// last held, never uninitialised memory.
    pub fn restore_len(&mut self) {
        self.len = self.capacity;
    }

    /// The alignment of the start address, in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The start address, for handing to the kernel.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The start address, writable, for handing to the kernel as a read
    /// destination.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Shrinks the visible length to `len` (after a short read, say). Does
    /// nothing when `len` is not smaller than the current length: a buffer
    /// never grows. The memory is not released until the buffer is dropped.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
        }
    }
}

impl Deref for AlignedBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is non-null and aligned; when `len > 0` it points to
        // an allocation of `capacity >= len` bytes that were zeroed at
        // creation and so are initialised, owned by `self` and borrowed
        // shared here. When `len == 0` a dangling non-null pointer is allowed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees the borrow is
        // unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for AlignedBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("alignment", &self.alignment)
            .finish_non_exhaustive()
    }
}

impl Clone for AlignedBuffer {
    /// A new allocation with the same alignment and the visible contents.
    /// Aborts through [`alloc::handle_alloc_error`] if memory runs out, like
    /// `Vec::clone`.
    fn clone(&self) -> Self {
        match AlignedBuffer::from_slice(self, self.alignment) {
            Ok(copy) => copy,
            Err(_) => alloc::handle_alloc_error(
                Layout::from_size_align(self.len, self.alignment)
                    .expect("a layout no larger than an existing one is valid"),
            ),
        }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if self.capacity == 0 {
            return;
        }
        // SAFETY: this exact (capacity, alignment) pair was accepted by
        // `Layout::from_size_align` when the buffer was allocated.
        let layout = unsafe { Layout::from_size_align_unchecked(self.capacity, self.alignment) };
        // SAFETY: `ptr` came from `alloc_zeroed` with this same layout (the
        // capacity never changes) and is freed only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

// SAFETY: an `AlignedBuffer` exclusively owns its allocation, like a
// `Box<[u8]>`; nothing else holds the pointer, so moving it to another
// thread moves the ownership with it.
unsafe impl Send for AlignedBuffer {}

// SAFETY: shared access only yields `&[u8]` (through `Deref`) or a
// `*const u8`; all mutation requires `&mut self`, so sharing between
// threads is as safe as sharing a `&[u8]`.
unsafe impl Sync for AlignedBuffer {}

/// Checks a direct-I/O request against a device's alignment: `pointer` must
/// be a multiple of `memory_bytes`, and `offset` and `length` multiples of
/// `offset_bytes`. Reports the first violation, in the order offset, length,
/// pointer, as an [`Error`] of kind [`ErrorKind::MisalignedOffset`],
/// [`ErrorKind::MisalignedLength`] or [`ErrorKind::MisalignedPointer`]. An
/// alignment of 0 (which [`crate::device::direct_io_alignment`] never
/// returns) is treated as 1, no constraint.
///
/// [`crate::File::read_at`] and [`crate::File::write_at`] check their
/// requests with it; their `io::Error` (kind `InvalidInput`) carries the
/// [`Error`] with the file's path, so a caller can inspect which part is
/// misaligned instead of parsing text:
///
/// ```
/// # fn inspect(error: &std::io::Error) {
/// use tailguard::ErrorKind;
/// let detail = error
///     .get_ref()
///     .and_then(|inner| inner.downcast_ref::<tailguard::Error>());
/// if let Some(ErrorKind::MisalignedOffset { required_bytes, .. }) = detail.map(|e| e.kind()) {
///     println!("offsets must be multiples of {required_bytes}");
/// }
/// # }
/// ```
pub fn check_alignment(
    pointer: usize,
    length: u64,
    offset: u64,
    alignment: DirectIoAlignment,
) -> Result<(), Error> {
    let offset_align = alignment.offset_bytes.max(1);
    let memory_align = alignment.memory_bytes.max(1);
    if !is_multiple(offset, u64::from(offset_align)) {
        return Err(Error::new(ErrorKind::MisalignedOffset {
            offset,
            required_bytes: offset_align,
        }));
    }
    if !is_multiple(length, u64::from(offset_align)) {
        return Err(Error::new(ErrorKind::MisalignedLength {
            length_bytes: length,
            required_bytes: offset_align,
        }));
    }
    // usize -> u64 is lossless on every target Linux runs on (pointers of at
    // most 64 bits).
    if !is_multiple(pointer as u64, u64::from(memory_align)) {
        return Err(Error::new(ErrorKind::MisalignedPointer {
            pointer,
            required_bytes: memory_align,
        }));
    }
    Ok(())
}

/// Checks that a request of `length` bytes at `offset` ends at or before the
/// largest file offset the kernel accepts (`i64::MAX`), as an [`Error`] of
/// kind [`ErrorKind::OffsetOutOfRange`]: past it the end would wrap, and a
/// request split into pieces would write its later pieces at the file's
/// start.
pub(crate) fn check_range(offset: u64, length: u64) -> Result<(), Error> {
    match offset.checked_add(length) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(Error::new(ErrorKind::OffsetOutOfRange {
            offset,
            length_bytes: length,
        })),
    }
}

/// Whether `value` is a multiple of `align` (not 0). Alignments are powers of
/// two in practice, and a mask then spares the division (tens of cycles, three
/// times per request); any other value still gets the exact answer.
fn is_multiple(value: u64, align: u64) -> bool {
    if align.is_power_of_two() {
        value & (align - 1) == 0
    } else {
        value % align == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIO_4K: DirectIoAlignment = DirectIoAlignment {
        memory_bytes: 512,
        offset_bytes: 4096,
    };

    #[test]
    fn pointers_are_aligned_for_many_alignments() {
        for shift in 0..=16 {
            let alignment = 1usize << shift;
            for len in [1usize, 7, 512, 4096, 65_537] {
                let buf = AlignedBuffer::new(len, alignment).unwrap();
                assert_eq!(buf.as_ptr() as usize % alignment, 0, "{alignment}");
                assert_eq!(buf.len(), len);
                assert_eq!(buf.alignment(), alignment);
                assert!(buf.iter().all(|&b| b == 0), "not zeroed");
            }
        }
    }

    #[test]
    fn zero_length_buffer_is_empty_and_aligned() {
        for alignment in [1usize, 512, 4096, 1 << 20] {
            let mut buf = AlignedBuffer::new(0, alignment).unwrap();
            assert!(buf.is_empty());
            assert_eq!(buf.len(), 0);
            assert_eq!(&buf[..], &[] as &[u8]);
            assert_eq!(&mut buf[..], &mut [] as &mut [u8]);
            assert_eq!(buf.as_ptr() as usize % alignment, 0);
            assert!(!buf.as_ptr().is_null());
            let copy = buf.clone();
            assert!(copy.is_empty());
        }
    }

    #[test]
    fn from_slice_round_trips_and_clone_copies() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut buf = AlignedBuffer::from_slice(&data, 4096).unwrap();
        assert_eq!(&buf[..], &data[..]);
        assert_eq!(buf.as_mut_ptr() as usize % 4096, 0);
        let copy = buf.clone();
        assert_eq!(&copy[..], &data[..]);
        assert_ne!(copy.as_ptr(), buf.as_ptr());
        assert_eq!(copy.alignment(), 4096);
        buf[0] = 0xff;
        assert_eq!(copy[0], 0, "clone shares memory");
    }

    #[test]
    fn truncate_shrinks_but_never_grows() {
        let mut buf = AlignedBuffer::from_slice(&[1, 2, 3, 4, 5, 6, 7, 8], 512).unwrap();
        buf.truncate(100);
        assert_eq!(buf.len(), 8);
        buf.truncate(3);
        assert_eq!(&buf[..], &[1, 2, 3]);
        buf.truncate(5);
        assert_eq!(buf.len(), 3);
        let copy = buf.clone();
        assert_eq!(&copy[..], &[1, 2, 3]);
        buf.truncate(0);
        assert!(buf.is_empty());
        // Dropping a truncated buffer frees with the original layout.
        drop(buf);
    }

    #[test]
    fn restore_len_undoes_truncation_and_keeps_contents() {
        let mut buf = AlignedBuffer::from_slice(&[9; 16], 64).unwrap();
        buf.truncate(3);
        buf[0] = 1;
        buf.restore_len();
        assert_eq!(buf.len(), 16);
        assert_eq!(buf.capacity(), 16);
        assert_eq!(&buf[..4], &[1, 9, 9, 9]);
        let mut empty = AlignedBuffer::new(0, 64).unwrap();
        empty.restore_len();
        assert!(empty.is_empty());
    }

    #[test]
    fn bad_requests_are_rejected_with_a_fix() {
        for alignment in [0usize, 3, 768, 4095] {
            let err = AlignedBuffer::new(16, alignment).unwrap_err();
            assert_eq!(
                err.kind(),
                &ErrorKind::AlignmentNotPowerOfTwo {
                    alignment_bytes: alignment
                }
            );
            assert!(err.to_string().contains("not a power of two"), "{err}");
        }
        let err = AlignedBuffer::new(usize::MAX - 100, 4096).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::BufferTooLarge { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("smaller requests"), "{err}");
        let oom = Error::new(ErrorKind::OutOfMemory {
            length_bytes: 1 << 40,
            alignment_bytes: 4096,
        });
        assert_eq!(oom.io_error_kind(), std::io::ErrorKind::OutOfMemory);
        assert!(oom.to_string().contains("out of memory"), "{oom}");
    }

    #[test]
    fn debug_does_not_dump_contents() {
        let buf = AlignedBuffer::from_slice(&[0xab; 64], 64).unwrap();
        let text = format!("{buf:?}");
        assert!(
            text.contains("len: 64") && text.contains("alignment: 64"),
            "{text}"
        );
        assert!(!text.contains("171,") && !text.contains('['), "{text}");
    }

    #[test]
    fn buffers_move_between_threads() {
        let buf = AlignedBuffer::from_slice(b"hello", 512).unwrap();
        let shared = std::sync::Arc::new(buf);
        let other = std::sync::Arc::clone(&shared);
        let got = std::thread::spawn(move || other.to_vec()).join().unwrap();
        assert_eq!(got, b"hello");
    }

    #[test]
    fn aligned_requests_pass() {
        let buf = AlignedBuffer::new(8192, 512).unwrap();
        assert_eq!(
            check_alignment(buf.as_ptr() as usize, 8192, 4096 * 3, DIO_4K),
            Ok(())
        );
        assert_eq!(check_alignment(0x200, 0, 0, DIO_4K), Ok(()));
        let none = DirectIoAlignment {
            memory_bytes: 0,
            offset_bytes: 0,
        };
        assert_eq!(check_alignment(3, 5, 7, none), Ok(()));
    }

    #[test]
    fn misaligned_offset_is_named() {
        let err = check_alignment(0x1000, 4096, 4097, DIO_4K).unwrap_err();
        assert_eq!(
            err.kind(),
            &ErrorKind::MisalignedOffset {
                offset: 4097,
                required_bytes: 4096
            }
        );
        assert_eq!(
            err.to_string(),
            "offset 4097 is not a multiple of 4096 (this device's direct-I/O offset \
             alignment); align it (for example down to 4096) or use buffered I/O"
        );
    }

    #[test]
    fn misaligned_length_is_named() {
        let err = check_alignment(0x1000, 5000, 8192, DIO_4K).unwrap_err();
        assert_eq!(
            err.kind(),
            &ErrorKind::MisalignedLength {
                length_bytes: 5000,
                required_bytes: 4096
            }
        );
        assert_eq!(
            err.to_string(),
            "length 5000 is not a multiple of 4096 (this device's direct-I/O offset \
             alignment); round it up to 8192 and use an AlignedBuffer of that length"
        );
    }

    #[test]
    fn a_length_that_cannot_round_up_is_told_to_round_down() {
        let err = check_alignment(0x1000, u64::MAX, 0, DIO_4K).unwrap_err();
        let rounded = u64::MAX - u64::MAX % 4096;
        assert!(
            err.to_string()
                .contains(&format!("round it down to {rounded}")),
            "{err}"
        );
    }

    #[test]
    fn misaligned_pointer_is_named() {
        let err = check_alignment(0x1100, 4096, 0, DIO_4K).unwrap_err();
        assert_eq!(
            err.kind(),
            &ErrorKind::MisalignedPointer {
                pointer: 0x1100,
                required_bytes: 512
            }
        );
        assert_eq!(
            err.to_string(),
            "buffer address 0x1100 is not a multiple of 512 (this device's direct-I/O \
             memory alignment); allocate it with AlignedBuffer::new(len, 512)"
        );
        let vec = [0u8; 4096 + 1];
        let odd = vec.as_ptr() as usize | 1;
        assert!(matches!(
            check_alignment(odd, 4096, 0, DIO_4K).map_err(|error| error.kind().clone()),
            Err(ErrorKind::MisalignedPointer { .. })
        ));
    }

    // The mask for powers of two and the division otherwise agree with `%`.
    #[test]
    fn multiples_match_the_remainder_for_any_alignment() {
        for align in [1u64, 2, 3, 512, 520, 4096, 6144] {
            for value in [0u64, 1, 511, 512, 1040, 4096, 6144, 8191, 12288] {
                assert_eq!(
                    is_multiple(value, align),
                    value % align == 0,
                    "{value} {align}"
                );
            }
        }
        let odd = DirectIoAlignment {
            memory_bytes: 3,
            offset_bytes: 520,
        };
        assert_eq!(check_alignment(9, 1040, 520, odd), Ok(()));
        assert!(matches!(
            check_alignment(9, 1041, 520, odd).map_err(|error| error.kind().clone()),
            Err(ErrorKind::MisalignedLength { .. })
        ));
        assert!(matches!(
            check_alignment(10, 1040, 520, odd).map_err(|error| error.kind().clone()),
            Err(ErrorKind::MisalignedPointer { .. })
        ));
    }
}
