//! The durable job store under `--data-dir`: job records and event histories in an embedded
//! database (redb: every commit is atomic and on disk when it returns), MP4s as plain files.
//!
//! Crash safety comes from ordering, not from repair: an MP4 is written to a temporary file,
//! synced and renamed into place *before* the record that says "completed" is committed, and a
//! record is deleted *before* its file. So whatever instant the process dies at, a completed
//! record always has its file; the worst left behind is a file without a record, which
//! [`Store::load`] deletes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use fastvideo_request::{OmniEvent, OmniRequest};
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::job::{JobError, Status, VideoObject};

const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
/// zstd-compressed JSON of a finished job's events: progress events repeat the same keys and
/// ids, so they shrink several-fold (measured in the test below); kept apart so listing never
/// reads them.
const EVENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SCHEMA: u64 = 1;

/// What the store keeps of one job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub video: VideoObject,
    /// Creation order, for listing.
    pub seq: u64,
    /// The owning API key's tag ([`crate::ApiKeys::owner_tag`]); `None` on a server without keys.
    pub owner: Option<String>,
    /// The request as admitted, seed fixed, so an unfinished job can run again after a restart.
    pub request: Option<OmniRequest>,
    /// Size of the stored MP4, checked at load.
    pub mp4_bytes: Option<u64>,
}

/// The job store of `--data-dir`: job records and their events in one redb file, the MP4s beside
/// it, so jobs survive a restart.
pub struct Store {
    db: Database,
    dir: PathBuf,
}

/// What [`Store::load`] found.
pub struct Loaded {
    pub records: Vec<Record>,
    /// Completed records whose MP4 was missing or the wrong size, now failed.
    pub lost: usize,
    /// Files without a completed record (a crash mid-write or mid-delete), deleted.
    pub orphans: usize,
}

fn encode_events(events: &[OmniEvent]) -> Result<Vec<u8>> {
    Ok(zstd::encode_all(serde_json::to_vec(events)?.as_slice(), 3)?)
}

/// Ids become file names: only what our ids are made of.
fn safe_id(id: &str) -> Result<&str> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        bail!("job id `{id}` cannot name a file");
    }
    Ok(id)
}

impl Store {
    /// Opens (or creates) the store in `dir`. One server per directory: a second one is told so.
    pub fn open(dir: &Path) -> Result<Self> {
        let ctx = || format!("--data-dir {}", dir.display());
        fs::create_dir_all(dir.join("videos")).with_context(ctx)?;
        let path = dir.join("jobs.redb");
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                bail!("--data-dir {}: in use by another fastvideo server (one server per data dir)", dir.display())
            }
            Err(e) => {
                return Err(e).with_context(|| format!("--data-dir {}: opening {}", dir.display(), path.display()))
            }
        };
        let txn = db.begin_write().with_context(ctx)?;
        {
            let mut meta = txn.open_table(META).with_context(ctx)?;
            let found = meta.get("schema").with_context(ctx)?.map(|v| v.value());
            match found {
                None => {
                    meta.insert("schema", SCHEMA).with_context(ctx)?;
                }
                Some(SCHEMA) => {}
                Some(v) => bail!("--data-dir {}: store schema v{v}; this build reads v{SCHEMA}", dir.display()),
            }
            txn.open_table(JOBS).with_context(ctx)?;
            txn.open_table(EVENTS).with_context(ctx)?;
        }
        txn.commit().with_context(ctx)?;
        Ok(Self { db, dir: dir.to_path_buf() })
    }

    /// The directory it was opened in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where job `id`'s video is kept; an id that could not name a file is an error.
    pub fn mp4_path(&self, id: &str) -> Result<PathBuf> {
        Ok(self.dir.join("videos").join(format!("{}.mp4", safe_id(id)?)))
    }

    /// Writes (or replaces) a record, and the events when given, in one commit.
    pub fn put(&self, rec: &Record, events: Option<&[OmniEvent]>) -> Result<()> {
        let id = safe_id(&rec.video.id)?;
        let value = serde_json::to_vec(rec)?;
        let events = events.map(encode_events).transpose()?;
        let txn = self.db.begin_write()?;
        {
            txn.open_table(JOBS)?.insert(id, value.as_slice())?;
            if let Some(ev) = &events {
                txn.open_table(EVENTS)?.insert(id, ev.as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Stores a finished job's MP4, then its completed record (with the MP4's size) and events.
    pub fn complete(&self, rec: &mut Record, mp4: &[u8], events: &[OmniEvent]) -> Result<()> {
        let path = self.mp4_path(&rec.video.id)?;
        let tmp = path.with_extension("mp4.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(mp4)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        rec.mp4_bytes = Some(mp4.len() as u64);
        self.put(rec, Some(events))
    }

    /// Forgets a job: the record first, then its file (see the module comment).
    pub fn remove(&self, id: &str) -> Result<()> {
        let id = safe_id(id)?;
        let txn = self.db.begin_write()?;
        {
            txn.open_table(JOBS)?.remove(id)?;
            txn.open_table(EVENTS)?.remove(id)?;
        }
        txn.commit()?;
        match fs::remove_file(self.mp4_path(id)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// A finished job's events (empty when none were stored).
    pub fn events(&self, id: &str) -> Result<Vec<OmniEvent>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(EVENTS)?;
        let Some(v) = table.get(id)? else { return Ok(Vec::new()) };
        Ok(serde_json::from_slice(&zstd::decode_all(v.value())?)?)
    }

    /// Every record in creation order, with the files checked against them: a completed record
    /// without its MP4 (the file removed by hand, a disk swapped) turns `failed`
    /// (`artifact_lost`), and files no record claims are deleted.
    pub fn load(&self) -> Result<Loaded> {
        let mut records = Vec::new();
        {
            let txn = self.db.begin_read()?;
            for row in txn.open_table(JOBS)?.iter()? {
                let (k, v) = row?;
                let rec: Record = serde_json::from_slice(v.value())
                    .with_context(|| format!("{}: record `{}` does not parse", self.dir.display(), k.value()))?;
                records.push(rec);
            }
        }
        records.sort_by_key(|r| r.seq);
        let mut lost = 0;
        for rec in records.iter_mut().filter(|r| r.video.status == Status::Completed) {
            let on_disk = fs::metadata(self.mp4_path(&rec.video.id)?).map(|m| m.len()).ok();
            if on_disk.is_none() || on_disk != rec.mp4_bytes {
                lost += 1;
                rec.video.status = Status::Failed;
                rec.video.error = Some(JobError {
                    code: "artifact_lost".into(),
                    message: format!("the stored video of `{}` is missing or damaged", rec.video.id),
                });
                rec.mp4_bytes = None;
                self.put(rec, None)?;
            }
        }
        let mut orphans = 0;
        let claimed: std::collections::HashSet<String> = records
            .iter()
            .filter(|r| r.video.status == Status::Completed)
            .map(|r| format!("{}.mp4", r.video.id))
            .collect();
        for entry in fs::read_dir(self.dir.join("videos"))? {
            let entry = entry?;
            if !claimed.contains(entry.file_name().to_string_lossy().as_ref()) {
                fs::remove_file(entry.path())?;
                orphans += 1;
            }
        }
        Ok(Loaded { records, lost, orphans })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, seq: u64) -> Record {
        let mut video = crate::job::tests::video(id);
        video.status = Status::Queued;
        Record { video, seq, owner: Some("tag".into()), request: None, mp4_bytes: None }
    }

    #[test]
    fn records_files_and_events_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let events = vec![OmniEvent::NodeStarted { request_id: "a".into(), node: "denoise".into() }];
        {
            let store = Store::open(dir.path()).unwrap();
            store.put(&record("video_b", 1), None).unwrap();
            let mut a = record("video_a", 0);
            a.video.status = Status::Completed;
            store.complete(&mut a, b"mp4 bytes", &events).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let loaded = store.load().unwrap();
        let ids: Vec<_> = loaded.records.iter().map(|r| r.video.id.as_str()).collect();
        assert_eq!(ids, ["video_a", "video_b"], "creation order");
        assert_eq!(loaded.records[0].owner.as_deref(), Some("tag"));
        assert_eq!(fs::read(store.mp4_path("video_a").unwrap()).unwrap(), b"mp4 bytes");
        assert_eq!(store.events("video_a").unwrap(), events);
        assert_eq!((loaded.lost, loaded.orphans), (0, 0));
        store.remove("video_a").unwrap();
        assert!(!store.mp4_path("video_a").unwrap().exists());
        assert_eq!(store.load().unwrap().records.len(), 1);
    }

    #[test]
    fn a_second_server_on_the_same_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Store::open(dir.path()).unwrap();
        let e = Store::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("in use by another fastvideo server"), "{e}");
    }

    #[test]
    fn load_fails_records_whose_file_is_gone_and_deletes_unclaimed_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut a = record("video_a", 0);
        a.video.status = Status::Completed;
        store.complete(&mut a, b"x", &[]).unwrap();
        fs::remove_file(store.mp4_path("video_a").unwrap()).unwrap();
        // A crash between the rename and the commit, and one mid-write.
        fs::write(store.mp4_path("video_q").unwrap(), b"half").unwrap();
        fs::write(dir.path().join("videos/video_r.mp4.tmp"), b"half").unwrap();
        store.put(&record("video_q", 1), None).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!((loaded.lost, loaded.orphans), (1, 2));
        let a = &loaded.records[0];
        assert_eq!(a.video.status, Status::Failed);
        assert_eq!(a.video.error.as_ref().unwrap().code, "artifact_lost");
        assert_eq!(fs::read_dir(dir.path().join("videos")).unwrap().count(), 0);
        // The failure itself was stored.
        assert_eq!(store.load().unwrap().records[0].video.status, Status::Failed);
    }

    #[test]
    fn event_histories_compress_several_fold() {
        let id = "video_0123456789abcdef01234567".to_string();
        let mut events = vec![OmniEvent::NodeStarted { request_id: id.clone(), node: "denoise".into() }];
        for step in 1..=50 {
            events.push(OmniEvent::Progress { request_id: id.clone(), node: "denoise".into(), step, total_steps: 50 });
        }
        let metrics = fastvideo_request::RequestMetrics {
            steps: 50,
            step_seconds: (0..50).map(|i| 0.5 + i as f64 * 1e-3).collect(),
            ..Default::default()
        };
        events.push(OmniEvent::Done { request_id: id, metrics });
        let plain = serde_json::to_vec(&events).unwrap().len();
        let packed = encode_events(&events).unwrap().len();
        eprintln!("a 50-step history: {plain} bytes of JSON, {packed} with zstd");
        assert!(packed * 4 < plain, "{plain} -> {packed}");
    }

    #[test]
    fn ids_that_are_not_ours_never_become_paths() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(store.mp4_path("../etc/passwd").is_err());
        assert!(store.remove("a/b").is_err());
    }
}
