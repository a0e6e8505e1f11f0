//! The FUSE filesystem: one file, `disk`, served with direct I/O.
//!
//! The file is opened with `FOPEN_DIRECT_IO` (no page cache in front of it:
//! every read and write of the loop device reaches this process) and
//! `FOPEN_PARALLEL_DIRECT_WRITES` (writes are not serialized on the inode
//! lock, so the device model sees the loop device's queue depth). Each
//! request goes through the faults, then the device model's timing, then
//! the store; `fsync` is the loop device's flush, which empties the volatile
//! write cache.

use crate::faults::{Admission, FaultState, RequestKind};
use crate::store::Store;
use crate::timing::RealTimeModel;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};
use std::ffi::OsStr;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, UNIX_EPOCH};
use tailguard_core::Direction;

/// The file's name in the mount.
pub(crate) const FILE_NAME: &str = "disk";
const FILE_INODE: INodeNo = INodeNo(2);
const TTL: Duration = Duration::from_secs(1);

/// The state every FUSE worker shares with the test's handle.
pub(crate) struct DeviceCore {
    pub(crate) store: Mutex<Store>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) model: Option<RealTimeModel>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DeviceCore {
    /// Faults and timing for one request; `Err` is the errno to answer.
    fn pass(&self, kind: RequestKind, offsets: Range<u64>) -> Result<(), Errno> {
        let mut first = true;
        loop {
            let admission = lock(&self.faults).admit(kind, first);
            first = false;
            match admission {
                Admission::Serve => break,
                Admission::Fail(errno) => return Err(Errno::from_i32(errno)),
                Admission::Wait(pause) => std::thread::sleep(pause),
            }
        }
        // Without a model the device spends no time on a request, so a
        // slow-down has nothing to stretch.
        let served = self.model.as_ref().map_or(Duration::ZERO, |model| {
            let started = Instant::now();
            let direction = match kind {
                RequestKind::Read => Direction::Read,
                RequestKind::Write | RequestKind::Flush => Direction::Write,
            };
            model.serve(direction, offsets.start, offsets.end - offsets.start);
            started.elapsed()
        });
        let extra = lock(&self.faults).stretch(served);
        if !extra.is_zero() {
            std::thread::sleep(extra);
        }
        match lock(&self.faults).error_for(kind, offsets) {
            Some(errno) => Err(Errno::from_i32(errno)),
            None => Ok(()),
        }
    }
}

pub(crate) struct DiskFs {
    pub(crate) core: Arc<DeviceCore>,
    pub(crate) size_bytes: u64,
}

impl DiskFs {
    fn attr(&self, inode: INodeNo) -> FileAttr {
        let file = inode == FILE_INODE;
        FileAttr {
            ino: inode,
            size: if file { self.size_bytes } else { 0 },
            blocks: if file { self.size_bytes / 512 } else { 0 },
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: if file {
                FileType::RegularFile
            } else {
                FileType::Directory
            },
            perm: if file { 0o600 } else { 0o700 },
            nlink: if file { 1 } else { 2 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _request: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Direct I/O that may be asynchronous, and many requests in flight:
        // the loop device's queue depth reaches the model. Refusals leave the
        // kernel's defaults, which still work (at lower depth).
        let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
        let _ = config.set_max_background(128);
        let _ = config.set_congestion_threshold(96);
        Ok(())
    }

    fn lookup(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == FILE_NAME {
            reply.entry(&TTL, &self.attr(FILE_INODE), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(
        &self,
        _request: &Request,
        inode: INodeNo,
        _handle: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        if inode == INodeNo::ROOT || inode == FILE_INODE {
            reply.attr(&TTL, &self.attr(inode));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn open(&self, _request: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if inode != FILE_INODE {
            reply.error(Errno::EISDIR);
            return;
        }
        reply.opened(
            FileHandle(0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        );
    }

    fn read(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _handle: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let end = offset.saturating_add(u64::from(size)).min(self.size_bytes);
        match self.core.pass(RequestKind::Read, offset..end.max(offset)) {
            Ok(()) => reply.data(&lock(&self.core.store).read(offset, u64::from(size))),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _handle: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let end = offset
            .saturating_add(data.len() as u64)
            .min(self.size_bytes);
        if offset >= self.size_bytes && !data.is_empty() {
            reply.error(Errno::ENOSPC);
            return;
        }
        match self.core.pass(RequestKind::Write, offset..end) {
            Ok(()) => {
                let written = lock(&self.core.store).write(offset, data);
                reply.written(written as u32);
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn fsync(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _handle: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.core.pass(RequestKind::Flush, 0..0) {
            Ok(()) => {
                lock(&self.core.store).flush();
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _handle: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) of the backing file, not a cache flush.
        reply.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_model_a_slow_down_stretches_no_request() {
        let core = DeviceCore {
            store: Mutex::new(Store::new(4096, false)),
            faults: Mutex::new(FaultState::new(1)),
            model: None,
        };
        lock(&core.faults).slow_down(0.25, Instant::now() + Duration::from_secs(60));
        assert_eq!(core.pass(RequestKind::Write, 0..4096), Ok(()));
        let counts = lock(&core.faults).counts;
        assert_eq!(counts.writes, 1);
        assert_eq!(
            counts.slowed, 0,
            "no model: the request took no device time"
        );
    }
}
