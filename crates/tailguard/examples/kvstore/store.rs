//! The store: an append-only log cut into segment files, an in-memory index
//! from key to the value's place in a segment, point reads, and compaction.
//!
//! A record is the key (8 bytes, little-endian), the value's length (4 bytes)
//! and the value. One [`LogWriter`] appends records to the active segment
//! and publishes their places in the index only once they are in the file,
//! so a reader never looks for bytes that are not there yet: on tailguard as
//! the stream's writes complete ([`StreamWriter::written_len`]), without
//! waiting; on `std::fs` after a flush every `flush_bytes`. Every
//! `sync_bytes` it makes the records durable (and publishes them all). A
//! segment past `segment_bytes` is closed, *sealed*, and a new one started.
//! A new segment's directory entry is synced before anything is written to
//! it, so synced records are durable under their file's name. After an I/O
//! error the writer refuses further records.
//!
//! [`Store::compact`] rewrites the sealed segments: it scans each one, copies
//! the records the index still points at into a new segment, syncs it,
//! repoints the index (where nothing newer came meanwhile), and deletes the
//! inputs. A reader that found a place in a segment deleted meanwhile looks
//! the key up again. A compaction that fails before repointing removes its
//! new segment and leaves its inputs sealed, to be compacted again.
//!
//! The same store runs on two kinds of I/O ([`Io`]): tailguard (the log
//! through a [`StreamWriter`] in the `log` class, compaction through a
//! [`StreamReader`] and writer in the low-share `compaction` class, reads
//! with [`tailguard::File::read_at_unaligned`] in the `reads` class, all
//! O_DIRECT), and `std::fs` buffered I/O (a `BufWriter`, a `BufReader`,
//! `pread`), which leaves the ordering of the device's work to the kernel.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tailguard::{
    IoClass, OpenOptions, ReaderOptions, Scheduler, StreamReader, StreamWriter, WriterOptions,
};

/// Key and value length in front of every value.
pub const HEADER_BYTES: usize = 12;

/// Which I/O the store does.
pub enum Io {
    /// Through a tailguard scheduler, O_DIRECT, in three classes.
    Tailguard {
        /// The scheduler.
        scheduler: Scheduler,
        /// Point reads: the latency class.
        reads: IoClass,
        /// The log writer.
        log: IoClass,
        /// Compaction's scans and writes: the low-share class.
        compaction: IoClass,
    },
    /// `std::fs` buffered I/O through the page cache.
    Std,
    /// `std::fs` buffered writes and scans, but point reads with O_DIRECT
    /// `pread`: what reads cost once the data outgrows the page cache.
    StdDirectReads,
}

/// Who writes a segment: the log or compaction (their classes differ).
#[derive(Clone, Copy)]
enum Writer {
    Log,
    Compaction,
}

/// The store's tunables.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Where the segments live.
    pub dir: PathBuf,
    /// A segment is sealed past this size: larger segments mean fewer files
    /// but longer compactions.
    pub segment_bytes: u64,
    /// On `std::fs`, records are flushed and published (readable) after this
    /// many bytes: more means fewer flushes but staler reads.
    pub flush_bytes: u64,
    /// Records are made durable after this many bytes: more means fewer
    /// `fdatasync`s but more to lose in a crash.
    pub sync_bytes: u64,
    /// Compaction starts once this many segments are sealed.
    pub compaction_inputs: usize,
}

/// Where a value lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Location {
    segment: u64,
    offset: u64,
    len: u32,
}

/// A record compaction copied: its key, old place and new place.
type Move = (u64, Location, Location);

/// One segment file, readable at any offset.
struct Segment {
    path: PathBuf,
    file: SegmentFile,
}

enum SegmentFile {
    Tailguard(Arc<tailguard::File>),
    /// The file, and in `StdDirectReads` an O_DIRECT handle for point reads.
    Std(fs::File, Option<fs::File>),
}

/// The open end of a segment being written.
enum Appender {
    Tailguard(Box<StreamWriter>),
    Std(BufWriter<fs::File>),
}

impl Appender {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Appender::Tailguard(writer) => writer.write_all(bytes),
            Appender::Std(writer) => writer.write_all(bytes),
        }
    }

    /// The appended bytes are in the file (readable).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Appender::Tailguard(writer) => writer.flush(),
            Appender::Std(writer) => writer.flush(),
        }
    }

    /// How far the file is written without waiting, where the appender
    /// knows (tailguard's [`StreamWriter::written_len`]); `None` for a
    /// `BufWriter`, which says nothing of what reached the file.
    fn written_len(&mut self) -> Option<u64> {
        match self {
            Appender::Tailguard(writer) => Some(writer.written_len()),
            Appender::Std(_) => None,
        }
    }

    /// The appended bytes are durable.
    fn sync(&mut self) -> io::Result<()> {
        match self {
            Appender::Tailguard(writer) => writer.sync(),
            Appender::Std(writer) => {
                writer.flush()?;
                writer.get_ref().sync_data()
            }
        }
    }

    /// Durable, and no more appends.
    fn finish(mut self) -> io::Result<()> {
        self.sync()?;
        match self {
            Appender::Tailguard(mut writer) => writer.close(),
            Appender::Std(_) => Ok(()),
        }
    }
}

/// What compaction did, in total.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompactionTotals {
    /// Compactions finished.
    pub runs: u64,
    /// Bytes of live records copied.
    pub copied_bytes: u64,
    /// Segments deleted.
    pub segments_removed: u64,
}

/// The store; see the module docs.
pub struct Store {
    io: Io,
    config: StoreConfig,
    index: RwLock<HashMap<u64, Location>>,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    sealed: Mutex<Vec<u64>>,
    next_segment: AtomicU64,
    compaction: Mutex<CompactionTotals>,
}

impl Store {
    /// An empty store in `config.dir` (created).
    pub fn create(io: Io, config: StoreConfig) -> io::Result<Self> {
        fs::create_dir_all(&config.dir)?;
        Ok(Self {
            io,
            config,
            index: RwLock::new(HashMap::new()),
            segments: RwLock::new(BTreeMap::new()),
            sealed: Mutex::new(Vec::new()),
            next_segment: AtomicU64::new(0),
            compaction: Mutex::new(CompactionTotals::default()),
        })
    }

    /// What compaction has done so far.
    pub fn compaction_totals(&self) -> CompactionTotals {
        *self.compaction.lock().unwrap()
    }

    /// Reads `key`'s value into `value` (resized); false if the key is absent.
    pub fn get(&self, key: u64, value: &mut Vec<u8>) -> io::Result<bool> {
        loop {
            let Some(location) = self.index.read().unwrap().get(&key).copied() else {
                return Ok(false);
            };
            let segment = self
                .segments
                .read()
                .unwrap()
                .get(&location.segment)
                .cloned();
            // Compacted away between the two looks: the index has moved on.
            let Some(segment) = segment else { continue };
            value.resize(location.len as usize, 0);
            self.read_exact_at(&segment, value, location.offset)?;
            return Ok(true);
        }
    }

    fn read_exact_at(&self, segment: &Segment, out: &mut [u8], offset: u64) -> io::Result<()> {
        let read = match (&self.io, &segment.file) {
            (Io::Tailguard { reads, .. }, SegmentFile::Tailguard(file)) => {
                let scheduler = file.scheduler();
                return scheduler.block_on(file.read_exact_at_unaligned(reads, out, offset));
            }
            (Io::Std, SegmentFile::Std(file, None)) => {
                file.read_exact_at(out, offset)?;
                out.len()
            }
            (Io::StdDirectReads, SegmentFile::Std(_, Some(direct))) => {
                read_direct(direct, out, offset)?
            }
            _ => unreachable!("a store's segments use its own kind of I/O"),
        };
        if read != out.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: short read at {offset}", segment.path.display()),
            ));
        }
        Ok(())
    }

    /// A new segment and its appender, for `writer`. Its directory entry is
    /// synced before it is used, so that its records, once synced, are
    /// durable under its name; where that fails, the file is removed.
    fn create_segment(&self, writer: Writer) -> io::Result<(u64, Arc<Segment>, Appender)> {
        let id = self.next_segment.fetch_add(1, Ordering::Relaxed);
        let path = self.config.dir.join(format!("segment-{id:08}"));
        let opened = self
            .open_segment(&path, writer)
            .and_then(|opened| sync_dir(&self.config.dir).map(|()| opened));
        let (file, appender) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                // The open's error says what went wrong; a file left behind
                // here goes with the directory.
                let _ = fs::remove_file(&path);
                return Err(error);
            }
        };
        let segment = Arc::new(Segment { path, file });
        self.segments.write().unwrap().insert(id, segment.clone());
        Ok((id, segment, appender))
    }

    /// Creates the segment file at `path` and opens it for this store's I/O.
    fn open_segment(&self, path: &Path, writer: Writer) -> io::Result<(SegmentFile, Appender)> {
        Ok(match &self.io {
            Io::Tailguard {
                scheduler,
                log,
                compaction,
                ..
            } => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(scheduler, path)?;
                let class = match writer {
                    Writer::Log => log,
                    Writer::Compaction => compaction,
                };
                let stream = StreamWriter::new(file, class, WriterOptions::default());
                let file = SegmentFile::Tailguard(stream.file().clone());
                (file, Appender::Tailguard(Box::new(stream)))
            }
            Io::Std | Io::StdDirectReads => {
                let file = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)?;
                let direct = match self.io {
                    Io::StdDirectReads => Some(
                        fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_DIRECT)
                            .open(path)?,
                    ),
                    _ => None,
                };
                let appender = BufWriter::with_capacity(128 * 1024, file.try_clone()?);
                (SegmentFile::Std(file, direct), Appender::Std(appender))
            }
        })
    }

    /// A sequential reader of `segment`, in the compaction class.
    fn scan(&self, segment: &Segment) -> io::Result<Box<dyn Read + '_>> {
        let options = ReaderOptions {
            buffer_bytes: 256 * 1024,
            read_ahead_buffers: 2,
        };
        Ok(match (&self.io, &segment.file) {
            (Io::Tailguard { compaction, .. }, SegmentFile::Tailguard(file)) => {
                Box::new(StreamReader::new(file.clone(), compaction, options))
            }
            // A handle of its own: a clone would share the appender's
            // file position.
            (Io::Std | Io::StdDirectReads, SegmentFile::Std(..)) => Box::new(
                BufReader::with_capacity(options.buffer_bytes, fs::File::open(&segment.path)?),
            ),
            _ => unreachable!("a store's segments use its own kind of I/O"),
        })
    }

    /// Compacts the sealed segments if there are enough; says whether it did.
    /// Where copying fails the inputs stay sealed and the output is removed;
    /// where deleting an input fails the compaction still stands.
    pub fn compact(&self) -> io::Result<bool> {
        let inputs: Vec<u64> = {
            let mut sealed = self.sealed.lock().unwrap();
            if sealed.len() < self.config.compaction_inputs {
                return Ok(false);
            }
            std::mem::take(&mut *sealed)
        };
        let (output, moves, written) = match self.copy_live(&inputs) {
            Ok(copied) => copied,
            Err(error) => {
                self.sealed.lock().unwrap().splice(0..0, inputs);
                return Err(error);
            }
        };
        self.install_compaction(&inputs, output, &moves, written)?;
        Ok(true)
    }

    /// Copies the records of `inputs` the index still points at into a new
    /// segment and syncs it: its id, the moves, the bytes copied. On an
    /// error the new segment is removed.
    fn copy_live(&self, inputs: &[u64]) -> io::Result<(u64, Vec<Move>, u64)> {
        let (output, segment, mut appender) = self.create_segment(Writer::Compaction)?;
        let mut moves = Vec::new();
        let copied = self
            .copy_records(inputs, output, &mut appender, &mut moves)
            .and_then(|written| appender.finish().map(|()| written));
        match copied {
            Ok(written) => Ok((output, moves, written)),
            Err(error) => {
                self.segments.write().unwrap().remove(&output);
                // The copy's error says what went wrong; a file left
                // behind here goes with the directory.
                let _ = fs::remove_file(&segment.path);
                Err(error)
            }
        }
    }

    /// Appends the live records of `inputs` to `appender` (segment
    /// `output`), noting each in `moves`; returns the bytes appended.
    fn copy_records(
        &self,
        inputs: &[u64],
        output: u64,
        appender: &mut Appender,
        moves: &mut Vec<Move>,
    ) -> io::Result<u64> {
        let mut written = 0u64;
        for input in inputs {
            let segment = self.segments.read().unwrap()[input].clone();
            let mut scan = self.scan(&segment)?;
            let mut offset = 0u64;
            while let Some((key, value)) = next_record(&mut scan)? {
                let old = Location {
                    segment: *input,
                    offset: offset + HEADER_BYTES as u64,
                    len: value.len() as u32,
                };
                offset += (HEADER_BYTES + value.len()) as u64;
                if self.index.read().unwrap().get(&key) != Some(&old) {
                    continue;
                }
                let new = Location {
                    segment: output,
                    offset: written + HEADER_BYTES as u64,
                    len: old.len,
                };
                appender.append(&record(key, &value))?;
                written += (HEADER_BYTES + value.len()) as u64;
                moves.push((key, old, new));
            }
        }
        Ok(written)
    }

    /// Repoints the index at the compacted copies and deletes the inputs.
    fn install_compaction(
        &self,
        inputs: &[u64],
        output: u64,
        moves: &[Move],
        written: u64,
    ) -> io::Result<()> {
        {
            let mut index = self.index.write().unwrap();
            for (key, old, new) in moves {
                if index.get(key) == Some(old) {
                    index.insert(*key, *new);
                }
            }
        }
        self.sealed.lock().unwrap().push(output);
        let removed: Vec<_> = {
            let mut segments = self.segments.write().unwrap();
            inputs.iter().filter_map(|id| segments.remove(id)).collect()
        };
        // Every input is tried; the first failure is reported.
        let mut first_error = None;
        let mut removed_count = 0u64;
        for segment in &removed {
            match fs::remove_file(&segment.path) {
                Ok(()) => removed_count += 1,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let mut totals = self.compaction.lock().unwrap();
        totals.runs += 1;
        totals.copied_bytes += written;
        totals.segments_removed += removed_count;
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes every segment file and the directory.
    pub fn destroy(self) -> io::Result<()> {
        let dir = self.config.dir.clone();
        drop(self);
        fs::remove_dir_all(dir)
    }
}

/// Makes `dir`'s entries (a segment created in it) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Reads `out.len()` bytes at `offset` with O_DIRECT `pread`, through an
/// aligned bounce buffer (4 KiB blocks: every device's alignment here).
fn read_direct(file: &fs::File, out: &mut [u8], offset: u64) -> io::Result<usize> {
    const BLOCK: u64 = 4096;
    let start = offset - offset % BLOCK;
    let end = (offset + out.len() as u64).div_ceil(BLOCK) * BLOCK;
    let mut bounce = tailguard::AlignedBuffer::new((end - start) as usize, BLOCK as usize)
        .map_err(io::Error::other)?;
    let read = file.read_at(&mut bounce, start)?;
    let skip = (offset - start) as usize;
    let available = read.saturating_sub(skip).min(out.len());
    out[..available].copy_from_slice(&bounce[skip..skip + available]);
    Ok(available)
}

/// The bytes of a record.
fn record(key: u64, value: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_BYTES + value.len());
    bytes.extend_from_slice(&key.to_le_bytes());
    bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
    bytes.extend_from_slice(value);
    bytes
}

/// The next record of a scan, or `None` at the end of the segment.
fn next_record(scan: &mut impl Read) -> io::Result<Option<(u64, Vec<u8>)>> {
    let mut header = [0u8; HEADER_BYTES];
    match scan.read_exact(&mut header) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let key = u64::from_le_bytes(header[..8].try_into().unwrap());
    let len = u32::from_le_bytes(header[8..].try_into().unwrap());
    let mut value = vec![0u8; len as usize];
    scan.read_exact(&mut value)?;
    Ok(Some((key, value)))
}

/// The one appender of the log: writes records, publishes them, seals
/// segments.
pub struct LogWriter<'store> {
    store: &'store Store,
    segment: u64,
    appender: Option<Appender>,
    written: u64,
    unpublished: Vec<(u64, Location)>,
    unpublished_bytes: u64,
    unsynced_bytes: u64,
    /// Bytes published so far.
    pub published_bytes: u64,
}

impl<'store> LogWriter<'store> {
    /// The log writer of `store`, on a new segment.
    pub fn new(store: &'store Store) -> io::Result<Self> {
        let (segment, _, appender) = store.create_segment(Writer::Log)?;
        Ok(Self {
            store,
            segment,
            appender: Some(appender),
            written: 0,
            unpublished: Vec::new(),
            unpublished_bytes: 0,
            unsynced_bytes: 0,
            published_bytes: 0,
        })
    }

    /// The open segment's appender; an error once an earlier error closed it.
    fn appender(&mut self) -> io::Result<&mut Appender> {
        self.appender.as_mut().ok_or_else(|| {
            io::Error::other("the log writer stopped at an earlier error; make a new one")
        })
    }

    /// Appends `key = value`; readable once published.
    pub fn put(&mut self, key: u64, value: &[u8]) -> io::Result<()> {
        let bytes = record(key, value);
        self.appender()?.append(&bytes)?;
        let location = Location {
            segment: self.segment,
            offset: self.written + HEADER_BYTES as u64,
            len: value.len() as u32,
        };
        self.unpublished.push((key, location));
        self.written += bytes.len() as u64;
        self.unpublished_bytes += bytes.len() as u64;
        self.unsynced_bytes += bytes.len() as u64;
        let store = self.store;
        let config = &store.config;
        if self.written >= config.segment_bytes {
            self.seal()?;
        } else if self.unsynced_bytes >= config.sync_bytes {
            self.appender()?.sync()?;
            self.unsynced_bytes = 0;
            self.publish();
        } else {
            let unpublished_bytes = self.unpublished_bytes;
            let appender = self.appender()?;
            match appender.written_len() {
                // Publish what is written as the writes complete: appends
                // never wait for a flush.
                Some(written) => self.publish_through(written),
                None if unpublished_bytes >= config.flush_bytes => {
                    appender.flush()?;
                    self.publish();
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Makes visible the records that end before `written`.
    fn publish_through(&mut self, written: u64) {
        let ready = self
            .unpublished
            .iter()
            .take_while(|(_, location)| location.offset + u64::from(location.len) <= written)
            .count();
        if ready == 0 {
            return;
        }
        let mut index = self.store.index.write().unwrap();
        for (key, location) in self.unpublished.drain(..ready) {
            index.insert(key, location);
            let bytes = HEADER_BYTES as u64 + u64::from(location.len);
            self.unpublished_bytes -= bytes;
            self.published_bytes += bytes;
        }
    }

    /// Makes the flushed records visible.
    fn publish(&mut self) {
        let mut index = self.store.index.write().unwrap();
        for (key, location) in self.unpublished.drain(..) {
            index.insert(key, location);
        }
        self.published_bytes += std::mem::take(&mut self.unpublished_bytes);
    }

    /// Makes everything durable and readable, and goes on in a new segment.
    /// After an error the writer is closed: later calls return an error.
    pub fn seal(&mut self) -> io::Result<()> {
        self.appender()?;
        self.appender.take().expect("checked above").finish()?;
        self.publish();
        self.store.sealed.lock().unwrap().push(self.segment);
        let (segment, _, appender) = self.store.create_segment(Writer::Log)?;
        self.segment = segment;
        self.appender = Some(appender);
        self.written = 0;
        self.unsynced_bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A std-I/O store in a fresh directory under the system's temporary
    /// one, with 4 KiB segments and compaction from 3 sealed ones.
    fn small_store(name: &str) -> Store {
        let dir =
            std::env::temp_dir().join(format!("tailguard-kvstore-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let config = StoreConfig {
            dir,
            segment_bytes: 4096,
            flush_bytes: 1024,
            sync_bytes: 4096,
            compaction_inputs: 3,
        };
        Store::create(Io::Std, config).unwrap()
    }

    /// Writes 100-byte values until `segments` segments are sealed.
    fn fill(store: &Store, segments: usize) {
        let mut writer = LogWriter::new(store).unwrap();
        let mut key = 0;
        while store.sealed.lock().unwrap().len() < segments {
            writer.put(key % 50, &[key as u8; 100]).unwrap();
            key += 1;
        }
    }

    fn files(store: &Store) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&store.config.dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn path_of(store: &Store, id: u64) -> PathBuf {
        store.segments.read().unwrap()[&id].path.clone()
    }

    #[test]
    fn a_failed_compaction_keeps_its_inputs_and_leaves_no_output() {
        let store = small_store("compaction-fails");
        fill(&store, 3);
        let inputs = store.sealed.lock().unwrap().clone();
        // A scan of a directory fails at its first read.
        let broken = path_of(&store, inputs[1]);
        fs::remove_file(&broken).unwrap();
        fs::create_dir(&broken).unwrap();
        let before = files(&store);
        assert!(store.compact().is_err());
        let mut sealed = store.sealed.lock().unwrap().clone();
        sealed.sort();
        assert_eq!(sealed, inputs, "the inputs stay sealed");
        assert_eq!(files(&store), before, "no output segment is left");
        let segments: Vec<u64> = store.segments.read().unwrap().keys().copied().collect();
        assert!(
            inputs.iter().all(|id| segments.contains(id)),
            "{segments:?}"
        );
        fs::remove_dir(&broken).unwrap();
        store.destroy().unwrap();
    }

    #[test]
    fn installing_a_compaction_tries_every_removal() {
        let store = small_store("removal-fails");
        fill(&store, 3);
        let inputs = store.sealed.lock().unwrap().clone();
        // Removing a directory with remove_file fails.
        let first = path_of(&store, inputs[0]);
        fs::remove_file(&first).unwrap();
        fs::create_dir(&first).unwrap();
        let (output, _, appender) = store.create_segment(Writer::Compaction).unwrap();
        appender.finish().unwrap();
        assert!(store.install_compaction(&inputs, output, &[], 0).is_err());
        for id in &inputs[1..] {
            assert!(
                !path_of_removed(&store, *id).exists(),
                "segment {id} is left"
            );
        }
        assert_eq!(store.compaction_totals().runs, 1);
        fs::remove_dir(&first).unwrap();
        store.destroy().unwrap();
    }

    fn path_of_removed(store: &Store, id: u64) -> PathBuf {
        store.config.dir.join(format!("segment-{id:08}"))
    }
}
