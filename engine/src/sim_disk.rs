//! A simulated disk behind the storage seam, driven by a seeded random source, for the fault
//! simulator and crash tests. It keeps, per file, the bytes as written and the bytes as last
//! synced, and injects the faults a real disk produces:
//!
//! - a crash loses writes not yet synced — all, some, or a prefix — and tears the first lost
//!   write at any byte (or, with `reorder`, applies its 512-byte sectors independently, as page
//!   write-back can);
//! - files created, renamed or removed since their directory was last synced may revert;
//! - `fsync` fails with EIO at a configurable rate;
//! - writes fail with ENOSPC once the disk's capacity is reached;
//! - a bit flips in data already synced, on request;
//! - `fsync` is slow (a seeded delay), to widen the window in which appends queue up.
//!
//! One seed and one sequence of calls give one outcome. After [`SimDisk::crash`] the old disk
//! answers every call with EIO (so a dropped journal cannot write on), and the returned disk
//! holds what survived.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::storage::{OpenMode, Storage, StorageFile, StorageLock};

/// Which faults the disk injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// At a crash, tear the first lost write at a random byte.
    pub torn_writes: bool,
    /// At a crash, apply lost writes' sectors in any order instead of as a prefix.
    pub reorder: bool,
    /// How many `fsync` calls in a thousand fail with EIO.
    pub sync_failures_per_mille: u32,
    /// Total bytes the disk holds; writes beyond fail with ENOSPC.
    pub capacity_bytes: Option<u64>,
    /// Each `fsync` takes up to this many microseconds (a slow disk), chosen by the seed.
    pub slow_sync_max_us: u64,
}

/// A small, seedable generator (SplitMix64): the simulator's only source of randomness.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator from a seed.
    #[must_use]
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }
}

/// One change not yet synced.
#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct FileState {
    data: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// The file's directory entry survives a crash.
    durable_entry: bool,
}

#[derive(Debug)]
struct State {
    rng: SimRng,
    faults: Faults,
    files: BTreeMap<PathBuf, FileState>,
    /// Entries removed since their directory was synced: they come back at a crash.
    removed: BTreeMap<PathBuf, FileState>,
    dirs: BTreeSet<PathBuf>,
    crashed: bool,
}

impl State {
    fn used(&self) -> u64 {
        self.files.values().map(|f| f.data.len() as u64).sum()
    }

    fn check(&self) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("the simulated disk crashed"));
        }
        Ok(())
    }
}

/// The simulated disk. Cloning shares it.
#[derive(Clone, Debug)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimDisk {
    /// An empty disk.
    #[must_use]
    pub fn new(seed: u64, faults: Faults) -> SimDisk {
        SimDisk {
            state: Arc::new(Mutex::new(State {
                rng: SimRng::new(seed),
                faults,
                files: BTreeMap::new(),
                removed: BTreeMap::new(),
                dirs: BTreeSet::new(),
                crashed: false,
            })),
        }
    }

    /// Changes the faults injected from now on.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.state).faults = faults;
    }

    /// Crashes the disk: this handle (and every file opened through it) fails from now on, and
    /// the returned disk holds what survived: synced data, plus whatever part of the unsynced
    /// writes the seeded source decides, with the first lost write torn.
    #[must_use]
    pub fn crash(&self) -> SimDisk {
        let mut state = lock(&self.state);
        state.crashed = true;
        let faults = state.faults;
        let mut rng = state.rng.clone();
        let mut files = BTreeMap::new();
        let removed = std::mem::take(&mut state.removed);
        let all: Vec<(PathBuf, FileState)> = state
            .files
            .iter()
            .map(|(p, f)| (p.clone(), f.clone()))
            .chain(removed)
            .collect();
        for (path, file) in all {
            if !file.durable_entry {
                continue;
            }
            let survived = settle(&mut rng, faults, &file);
            files.insert(
                path,
                FileState {
                    data: survived.clone(),
                    durable: survived,
                    pending: Vec::new(),
                    durable_entry: true,
                },
            );
        }
        state.rng.next_u64();
        SimDisk {
            state: Arc::new(Mutex::new(State {
                rng,
                faults,
                files,
                removed: BTreeMap::new(),
                dirs: state.dirs.clone(),
                crashed: false,
            })),
        }
    }

    /// Flips one random bit of synced data in a random file whose name ends with `suffix`;
    /// returns the file and byte offset.
    pub fn flip_synced_bit(&self, suffix: &str) -> Option<(PathBuf, u64)> {
        let mut state = lock(&self.state);
        let candidates: Vec<PathBuf> = state
            .files
            .iter()
            .filter(|(p, f)| {
                p.to_string_lossy().ends_with(suffix)
                    && !f.durable.is_empty()
                    && f.pending.is_empty()
            })
            .map(|(p, _)| p.clone())
            .collect();
        let pick = state.rng.below(candidates.len() as u64) as usize;
        let path = candidates.get(pick)?.clone();
        let bit = state.rng.next_u64();
        let file = state.files.get_mut(&path)?;
        let offset = bit % file.durable.len() as u64;
        let mask = 1u8 << ((bit >> 32) % 8);
        let i = usize::try_from(offset).ok()?;
        *file.durable.get_mut(i)? ^= mask;
        *file.data.get_mut(i)? ^= mask;
        Some((path, offset))
    }

    /// The unsynced changes of each file, described (offset and length of writes, new lengths),
    /// and the synced length: for diagnosing a simulator failure.
    #[must_use]
    pub fn describe_unsynced(&self) -> Vec<String> {
        lock(&self.state)
            .files
            .iter()
            .filter(|(_, f)| !f.pending.is_empty())
            .map(|(p, f)| {
                let changes: Vec<String> = f
                    .pending
                    .iter()
                    .map(|c| match c {
                        Pending::Write { offset, bytes } => {
                            format!("write {offset}+{}", bytes.len())
                        }
                        Pending::SetLen(len) => format!("set_len {len}"),
                    })
                    .collect();
                format!(
                    "{}: synced {} bytes, then {}",
                    p.display(),
                    f.durable.len(),
                    changes.join(", ")
                )
            })
            .collect()
    }

    /// How many unsynced changes each file holds.
    #[must_use]
    pub fn unsynced(&self) -> BTreeMap<PathBuf, usize> {
        lock(&self.state)
            .files
            .iter()
            .map(|(p, f)| (p.clone(), f.pending.len()))
            .collect()
    }

    /// The bytes of a file as written, if it exists.
    #[must_use]
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        lock(&self.state).files.get(path).map(|f| f.data.clone())
    }

    /// Every file and its bytes, for comparing disk images.
    #[must_use]
    pub fn image(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        lock(&self.state)
            .files
            .iter()
            .map(|(p, f)| (p.clone(), f.data.clone()))
            .collect()
    }
}

/// What a file holds after a crash.
fn settle(rng: &mut SimRng, faults: Faults, file: &FileState) -> Vec<u8> {
    let mut out = file.durable.clone();
    if file.pending.is_empty() {
        return out;
    }
    // A prefix of the pending changes lands whole; the next one may land in part.
    let kept = rng.below(file.pending.len() as u64 + 1) as usize;
    for change in file.pending.iter().take(kept) {
        apply(&mut out, change);
    }
    if let Some(Pending::Write { offset, bytes }) = file.pending.get(kept) {
        if faults.reorder {
            // Each 512-byte sector of the write lands or not.
            let mut at = 0usize;
            while at < bytes.len() {
                let sector_end = ((offset + at as u64) / 512 + 1) * 512;
                let end = (sector_end - offset).min(bytes.len() as u64) as usize;
                if rng.chance(500) {
                    let part = bytes.get(at..end).unwrap_or_default().to_vec();
                    apply(
                        &mut out,
                        &Pending::Write {
                            offset: offset + at as u64,
                            bytes: part,
                        },
                    );
                } else if offset + end as u64 > out.len() as u64 {
                    // The file was extended: space the sector did not reach reads as zeros.
                    let new_len = usize::try_from(offset + end as u64).unwrap_or(usize::MAX);
                    out.resize(new_len, 0);
                }
                at = end;
            }
        } else if faults.torn_writes {
            let cut = rng.below(bytes.len() as u64 + 1) as usize;
            let part = bytes.get(..cut).unwrap_or_default().to_vec();
            apply(
                &mut out,
                &Pending::Write {
                    offset: *offset,
                    bytes: part,
                },
            );
        }
    }
    out
}

fn apply(data: &mut Vec<u8>, change: &Pending) {
    match change {
        Pending::Write { offset, bytes } => {
            let start = usize::try_from(*offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(bytes.len());
            if data.len() < end {
                data.resize(end, 0);
            }
            if let Some(slot) = data.get_mut(start..end) {
                slot.copy_from_slice(bytes);
            }
        }
        Pending::SetLen(len) => data.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut State, &Path) -> io::Result<T>) -> io::Result<T> {
        let mut state = lock(&self.state);
        state.check()?;
        f(&mut state, &self.path)
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} does not exist", path.display()),
    )
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|state, path| {
            let file = state.files.get(path).ok_or_else(|| not_found(path))?;
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(file.data.len());
            let n = buf.len().min(file.data.len() - start);
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), file.data.get(start..start + n)) {
                dst.copy_from_slice(src);
            }
            Ok(n)
        })
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|state, path| {
            let used = state.used();
            let capacity = state.faults.capacity_bytes;
            let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
            let growth = (offset + buf.len() as u64).saturating_sub(file.data.len() as u64);
            if capacity.is_some_and(|c| used + growth > c) {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let change = Pending::Write {
                offset,
                bytes: buf.to_vec(),
            };
            apply(&mut file.data, &change);
            file.pending.push(change);
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let delay = {
            let mut state = lock(&self.state);
            let max = state.faults.slow_sync_max_us;
            state.rng.below(max + 1)
        };
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        self.with(|state, path| {
            let fail = {
                let per_mille = state.faults.sync_failures_per_mille;
                state.rng.chance(per_mille)
            };
            let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
            if fail {
                // After a failed fsync the kernel may have dropped the dirty pages: the
                // unsynced changes stay unsettled until a crash decides them.
                return Err(io::Error::from_raw_os_error(5)); // EIO
            }
            file.durable = file.data.clone();
            file.pending.clear();
            Ok(())
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.with(|state, path| {
            Ok(state
                .files
                .get(path)
                .ok_or_else(|| not_found(path))?
                .data
                .len() as u64)
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|state, path| {
            let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
            let change = Pending::SetLen(len);
            apply(&mut file.data, &change);
            file.pending.push(change);
            Ok(())
        })
    }
}

#[derive(Debug)]
struct SimLock;

impl StorageLock for SimLock {}

impl Storage for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut state = lock(&self.state);
        state.check()?;
        match mode {
            OpenMode::Read | OpenMode::ReadWrite => {
                if !state.files.contains_key(path) {
                    return Err(not_found(path));
                }
            }
            OpenMode::CreateNew => {
                if state.files.contains_key(path) {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        path.display().to_string(),
                    ));
                }
                state.files.insert(path.to_path_buf(), FileState::default());
            }
        }
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check()?;
        for ancestor in path.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let state = lock(&self.state);
        state.check()?;
        let mut names: BTreeSet<String> = BTreeSet::new();
        for p in state.files.keys().chain(state.dirs.iter()) {
            if p.parent() == Some(path) {
                if let Some(name) = p.file_name() {
                    names.insert(name.to_string_lossy().into_owned());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn exists(&self, path: &Path) -> bool {
        let state = lock(&self.state);
        state.files.contains_key(path) || state.dirs.contains(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check()?;
        let mut file = state.files.remove(from).ok_or_else(|| not_found(from))?;
        if file.durable_entry {
            state.removed.insert(from.to_path_buf(), file.clone());
        }
        file.durable_entry = false;
        state.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check()?;
        let file = state.files.remove(path).ok_or_else(|| not_found(path))?;
        if file.durable_entry {
            state.removed.insert(path.to_path_buf(), file);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check()?;
        for (p, file) in state.files.iter_mut() {
            if p.parent() == Some(path) {
                file.durable_entry = true;
            }
        }
        state.removed.retain(|p, _| p.parent() != Some(path));
        Ok(())
    }

    fn lock(&self, _path: &Path) -> io::Result<Box<dyn StorageLock>> {
        lock(&self.state).check()?;
        Ok(Box::new(SimLock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(faults: Faults) -> (SimDisk, Arc<dyn StorageFile>, PathBuf) {
        let d = SimDisk::new(7, faults);
        let dir = PathBuf::from("/sim");
        d.create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let f = d.open(&path, OpenMode::CreateNew).unwrap();
        d.sync_dir(&dir).unwrap();
        (d, f, path)
    }

    #[test]
    fn a_crash_keeps_synced_data_and_a_prefix_of_the_rest() {
        for seed in 0..200 {
            let (d, f, path) = disk(Faults {
                torn_writes: true,
                ..Faults::default()
            });
            lock(&d.state).rng = SimRng::new(seed);
            f.write_all_at(b"synced", 0).unwrap();
            f.sync_data().unwrap();
            f.write_all_at(b"-unsynced-tail", 6).unwrap();
            let after = d.crash();
            let bytes = after.read_file(&path).unwrap();
            assert!(bytes.starts_with(b"synced"), "seed {seed}: {bytes:?}");
            assert!(
                b"synced-unsynced-tail".starts_with(&bytes),
                "seed {seed}: a prefix, got {bytes:?}"
            );
            assert!(
                f.read_at(&mut [0u8; 4], 0).is_err(),
                "the crashed disk refuses"
            );
        }
    }

    #[test]
    fn unsynced_directory_entries_vanish_at_a_crash() {
        let d = SimDisk::new(1, Faults::default());
        let dir = PathBuf::from("/sim");
        d.create_dir_all(&dir).unwrap();
        let f = d.open(&dir.join("a"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_data().unwrap();
        let after = d.crash();
        assert!(after.read_file(&dir.join("a")).is_none());
    }

    #[test]
    fn full_disk_refuses_writes_and_failing_syncs_say_eio() {
        let (_d, f, _) = disk(Faults {
            capacity_bytes: Some(10),
            sync_failures_per_mille: 1000,
            ..Faults::default()
        });
        f.write_all_at(b"0123456789", 0).unwrap();
        assert_eq!(
            f.write_all_at(b"x", 10).unwrap_err().raw_os_error(),
            Some(28)
        );
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(5));
    }
}
