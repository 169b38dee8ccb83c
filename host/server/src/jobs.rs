//! The server's record of every video job: status and progress for polling, the MP4 once done,
//! and the job's event history plus a live broadcast for SSE and WebSocket subscribers (who may
//! join late: they get the history first). With a [`Store`], every job is also on disk: created,
//! finished and deleted jobs are committed before the client hears of it, so a restart (even
//! after SIGKILL) finds them; without one they live in memory only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fastvideo_engine::{Engine, EngineError, Handle};
use fastvideo_request::{OmniEvent, OmniRequest};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::auth::{ApiKeys, Caller};
use crate::error::ApiError;
use crate::store::{Record, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

fn video_object() -> &'static str {
    "video"
}

/// OpenAI's `Video` object plus our request echo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VideoObject {
    pub id: String,
    #[serde(skip_deserializing, default = "video_object")]
    pub object: &'static str,
    pub model: String,
    pub status: Status,
    pub progress: u32,
    pub created_at: u64,
    pub completed_at: Option<u64>,
    pub expires_at: Option<u64>,
    pub seconds: String,
    pub size: String,
    pub error: Option<JobError>,
    pub remixed_from_video_id: Option<String>,
    pub prompt: String,
    pub seed: Option<u64>,
    pub num_frames: u32,
    pub predicted_seconds: f64,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Failed => "failed",
        }
    }
}

impl VideoObject {
    fn ended(&self) -> bool {
        matches!(self.status, Status::Completed | Status::Failed)
    }
}

/// How long finished jobs are kept, and how much their MP4s may take.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention {
    /// A finished job expires this long after it ended (`expires_at`); `None`: never.
    pub ttl: Option<Duration>,
    /// New jobs get HTTP 507 while stored MP4s take this many bytes or more.
    pub disk_budget: Option<u64>,
}

/// A finished job's MP4: in memory, or a file of the store.
#[derive(Clone)]
pub enum Mp4 {
    Memory(Arc<Vec<u8>>),
    Stored(PathBuf),
}

impl Mp4 {
    pub async fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Mp4::Memory(b) => Ok(b.as_ref().clone()),
            Mp4::Stored(p) => tokio::fs::read(p).await,
        }
    }
}

struct Job {
    video: VideoObject,
    /// Creation order, for listing.
    seq: u64,
    mp4: Option<Mp4>,
    mp4_bytes: u64,
    /// Events so far. Once a stored job ends they move to the store (memory stays flat).
    history: Vec<OmniEvent>,
    history_stored: bool,
    /// The engine's `Done`, held back until the MP4 is stored so a client that sees `done`
    /// can fetch the content at once.
    held_done: Option<OmniEvent>,
    tx: broadcast::Sender<OmniEvent>,
    /// Deleted while still running: invisible to clients, kept until its follower ends so
    /// current subscribers still see the final `error` event.
    deleted: bool,
    /// The API key that created it: the only one that sees it.
    owner: Caller,
    owner_tag: Option<String>,
    request: Option<OmniRequest>,
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[derive(Default)]
struct Inner {
    jobs: BTreeMap<String, Job>,
    next_seq: u64,
    /// Bytes of the MP4s held (in memory or on disk), for the disk budget.
    used_bytes: u64,
}

impl Job {
    fn new(
        video: VideoObject,
        seq: u64,
        owner: Caller,
        owner_tag: Option<String>,
        request: Option<OmniRequest>,
    ) -> Self {
        let (tx, _) = broadcast::channel(1024);
        Job {
            video,
            seq,
            mp4: None,
            mp4_bytes: 0,
            history: Vec::new(),
            history_stored: false,
            held_done: None,
            tx,
            deleted: false,
            owner,
            owner_tag,
            request,
        }
    }

    fn expired(&self, now: u64) -> bool {
        self.video.expires_at.is_some_and(|e| now >= e)
    }

    fn visible_to(&self, who: Caller) -> bool {
        !self.deleted && self.owner == who && !self.expired(now_secs())
    }

    /// The events now live in the store; subscribers read them there.
    fn history_to_store(&mut self) {
        self.history = Vec::new();
        self.history_stored = true;
    }

    fn record(&self) -> Record {
        Record {
            video: self.video.clone(),
            seq: self.seq,
            owner: self.owner_tag.clone(),
            request: self.request.clone(),
            mp4_bytes: (self.mp4_bytes > 0).then_some(self.mp4_bytes),
        }
    }
}

/// All jobs of this server process.
#[derive(Clone, Default)]
pub struct Jobs {
    inner: Arc<Mutex<Inner>>,
    store: Option<Arc<Store>>,
    retention: Retention,
}

/// A subscription: what happened so far, then what happens next. `None` receiver when the job
/// already ended.
pub type Subscription = (Vec<OmniEvent>, Option<broadcast::Receiver<OmniEvent>>);

/// What a restart found in the store.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub finished: usize,
    /// Unfinished jobs queued again from their stored request.
    pub requeued: usize,
    /// Unfinished jobs marked failed (`server_restarted`).
    pub failed: usize,
    /// Completed jobs whose MP4 had gone (`artifact_lost`).
    pub lost: usize,
}

/// `3.2 KiB`, `20.0 GiB`.
fn human_bytes(n: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

fn storage_error(e: anyhow::Error) -> ApiError {
    ApiError::Internal { code: "storage_failed".into(), message: format!("the job store: {e:#}") }
}

impl Jobs {
    /// Jobs kept in `store` too, under `retention`.
    pub fn durable(store: Option<Store>, retention: Retention) -> Self {
        Self { inner: Arc::default(), store: store.map(Arc::new), retention }
    }

    pub fn store_dir(&self) -> Option<&std::path::Path> {
        self.store.as_deref().map(Store::dir)
    }

    /// Refuses new work while finished MP4s fill the disk budget.
    pub fn check_space(&self) -> Result<(), ApiError> {
        let Some(budget) = self.retention.disk_budget else { return Ok(()) };
        let used = self.inner.lock().unwrap().used_bytes;
        if used < budget {
            return Ok(());
        }
        let place = self.store_dir().map(|d| format!(" under {}", d.display())).unwrap_or_default();
        Err(ApiError::InsufficientStorage {
            message: format!(
                "stored videos{place} take {} of the {} disk budget; delete videos (DELETE /v1/videos/ID) \
                 or wait for them to expire",
                human_bytes(used),
                human_bytes(budget)
            ),
        })
    }

    /// Records a new job; with a store, on disk before this returns.
    pub fn insert(
        &self,
        video: VideoObject,
        owner: Caller,
        owner_tag: Option<String>,
        request: Option<OmniRequest>,
    ) -> Result<(), ApiError> {
        let seq = {
            let mut g = self.inner.lock().unwrap();
            g.next_seq += 1;
            g.next_seq - 1
        };
        let job = Job::new(video, seq, owner, owner_tag, request);
        if let Some(store) = &self.store {
            store.put(&job.record(), None).map_err(storage_error)?;
        }
        self.inner.lock().unwrap().jobs.insert(job.video.id.clone(), job);
        Ok(())
    }

    pub fn get(&self, id: &str, who: Caller) -> Option<VideoObject> {
        self.inner.lock().unwrap().jobs.get(id).filter(|j| j.visible_to(who)).map(|j| j.video.clone())
    }

    pub fn content(&self, id: &str, who: Caller) -> Option<(VideoObject, Option<Mp4>)> {
        self.inner.lock().unwrap().jobs.get(id).filter(|j| j.visible_to(who)).map(|j| (j.video.clone(), j.mp4.clone()))
    }

    /// Drops an ended job from memory and the store.
    fn forget(&self, id: &str) -> Option<VideoObject> {
        let job = {
            let mut g = self.inner.lock().unwrap();
            let job = g.jobs.remove(id)?;
            g.used_bytes -= job.mp4_bytes;
            job
        };
        if let Some(store) = &self.store {
            if let Err(e) = store.remove(id) {
                tracing::warn!(id, "removing a stored job: {e:#}");
            }
        }
        Some(job.video)
    }

    /// Forgets a job: at once if it ended, else when its follower ends. Either way it is gone
    /// from the store now, so a restart does not run a deleted job again.
    pub fn remove(&self, id: &str, who: Caller) -> Option<VideoObject> {
        let video = {
            let mut g = self.inner.lock().unwrap();
            let j = g.jobs.get_mut(id).filter(|j| j.visible_to(who))?;
            if j.video.ended() {
                None
            } else {
                j.deleted = true;
                Some(j.video.clone())
            }
        };
        let Some(video) = video else { return self.forget(id) };
        if let Some(store) = &self.store {
            if let Err(e) = store.remove(id) {
                tracing::warn!(id, "removing a stored job: {e:#}");
            }
        }
        Some(video)
    }

    /// Jobs in creation order (`desc`: newest first), starting after `after`, at most `limit`.
    /// Returns the page and whether more follow.
    pub fn list(&self, after: Option<&str>, limit: usize, desc: bool, who: Caller) -> Option<(Vec<VideoObject>, bool)> {
        let g = self.inner.lock().unwrap();
        let mut all: Vec<&Job> = g.jobs.values().filter(|j| j.visible_to(who)).collect();
        all.sort_by_key(|j| j.seq);
        if desc {
            all.reverse();
        }
        let start = match after {
            Some(a) => all.iter().position(|j| j.video.id == a)? + 1,
            None => 0,
        };
        let rest = &all[start.min(all.len())..];
        let page = rest.iter().take(limit).map(|j| j.video.clone()).collect();
        Some((page, rest.len() > limit))
    }

    /// Jobs whose record is not final yet (queued, running, or encoding their MP4).
    pub fn unfinished(&self) -> usize {
        self.inner.lock().unwrap().jobs.values().filter(|j| !j.video.ended()).count()
    }

    pub fn subscribe(&self, id: &str, who: Caller) -> Option<Subscription> {
        let (history, rx, stored) = {
            let g = self.inner.lock().unwrap();
            let j = g.jobs.get(id).filter(|j| j.visible_to(who))?;
            (j.history.clone(), (!j.video.ended()).then(|| j.tx.subscribe()), j.history_stored)
        };
        if !stored {
            return Some((history, rx));
        }
        let store = self.store.as_ref()?;
        match store.events(id) {
            Ok(h) => Some((h, None)),
            Err(e) => {
                tracing::warn!(id, "reading a stored job's events: {e:#}");
                Some((Vec::new(), None))
            }
        }
    }

    /// Deletes expired jobs (their records and MP4s); returns how many.
    pub fn sweep(&self) -> usize {
        let now = now_secs();
        let expired: Vec<String> = {
            let g = self.inner.lock().unwrap();
            g.jobs.values().filter(|j| j.video.ended() && j.expired(now)).map(|j| j.video.id.clone()).collect()
        };
        expired.iter().filter(|id| self.forget(id).is_some()).count()
    }

    /// How often [`Jobs::sweep`] should run: often enough that an expired MP4 does not outlive
    /// its `expires_at` by more than a tenth of the TTL (or a minute).
    pub fn sweep_interval(&self) -> Option<Duration> {
        self.retention.ttl.map(|t| (t / 10).clamp(Duration::from_secs(1), Duration::from_secs(60)))
    }

    fn with<R>(&self, id: &str, f: impl FnOnce(&mut Job) -> R) -> Option<R> {
        self.inner.lock().unwrap().jobs.get_mut(id).map(f)
    }

    fn publish(job: &mut Job, ev: OmniEvent) {
        job.history.push(ev.clone());
        let _ = job.tx.send(ev);
    }

    /// Reads the store after a restart: finished jobs come back as they were; unfinished ones
    /// are submitted again from their stored request (same id and seed) when `requeue`, else
    /// (or when the engine refuses them now) they turn `failed` with `server_restarted`.
    pub fn restore(&self, engine: &Engine, keys: &ApiKeys, requeue: bool) -> anyhow::Result<Restored> {
        let Some(store) = self.store.clone() else { return Ok(Restored::default()) };
        let loaded = store.load()?;
        let mut out = Restored { lost: loaded.lost, ..Default::default() };
        for rec in loaded.records {
            let owner = keys.caller_for(rec.owner.as_deref());
            let mut job = Job::new(rec.video, rec.seq, owner, rec.owner, rec.request);
            let mut handle = None;
            if job.video.ended() {
                out.finished += 1;
                job.history_stored = true;
                if let (Status::Completed, Some(n)) = (job.video.status, rec.mp4_bytes) {
                    job.mp4 = Some(Mp4::Stored(store.mp4_path(&job.video.id)?));
                    job.mp4_bytes = n;
                }
            } else {
                let was = job.video.status;
                let submitted = match (&job.request, requeue) {
                    (Some(r), true) => engine.submit(r.clone()).map_err(|e| e.to_string()),
                    (None, true) => Err("its request was not stored".into()),
                    (_, false) => Err("the server was started with --restart-jobs fail".into()),
                };
                match submitted {
                    Ok(h) => {
                        out.requeued += 1;
                        job.video.status = Status::Queued;
                        job.video.progress = 0;
                        job.video.predicted_seconds = h.predicted_seconds;
                        handle = Some(h);
                    }
                    Err(why) => {
                        out.failed += 1;
                        let message = format!(
                            "the server restarted while this job was {}; it did not run again: {why}",
                            was.as_str()
                        );
                        let e = JobError { code: "server_restarted".into(), message };
                        job.video.status = Status::Failed;
                        job.video.completed_at = Some(now_secs());
                        job.video.expires_at = self.expiry();
                        job.history.push(OmniEvent::Error {
                            request_id: job.video.id.clone(),
                            code: e.code.clone(),
                            message: e.message.clone(),
                        });
                        job.video.error = Some(e);
                        store.put(&job.record(), Some(&job.history))?;
                        job.history_to_store();
                    }
                }
            }
            let mut g = self.inner.lock().unwrap();
            g.next_seq = g.next_seq.max(job.seq + 1);
            g.used_bytes += job.mp4_bytes;
            g.jobs.insert(job.video.id.clone(), job);
            drop(g);
            if let Some(h) = handle {
                tokio::spawn(self.clone().follow(h, fastvideo_media::mp4_bytes));
            }
        }
        self.sweep();
        Ok(out)
    }

    fn expiry(&self) -> Option<u64> {
        self.retention.ttl.map(|t| now_secs().saturating_add(t.as_secs().max(1)))
    }

    /// Follows an engine handle to the end, keeping the record current. Runs as its own task.
    pub async fn follow(
        self,
        mut handle: Handle,
        encode: fn(&fastvideo_request::VideoArtifact) -> anyhow::Result<Vec<u8>>,
    ) {
        let id = handle.request_id.clone();
        while let Some(ev) = handle.events.recv().await {
            self.with(&id, |j| {
                match &ev {
                    OmniEvent::NodeStarted { .. } if j.video.status == Status::Queued => {
                        j.video.status = Status::InProgress;
                    }
                    OmniEvent::Progress { step, total_steps, .. } => {
                        j.video.status = Status::InProgress;
                        // 100 is reserved for "completed" (decode and encode still follow).
                        j.video.progress = (step * 100 / (*total_steps).max(1)).min(99);
                    }
                    _ => {}
                }
                if matches!(ev, OmniEvent::Done { .. }) {
                    j.held_done = Some(ev.clone());
                } else {
                    Self::publish(j, ev.clone());
                }
            });
        }
        let result = handle.output.await.unwrap_or(Err(EngineError::Stopped));
        let result = match result {
            Ok(out) => match out.video().cloned() {
                Some(video) => match tokio::task::spawn_blocking(move || encode(&video)).await {
                    Ok(Ok(bytes)) => Ok(bytes),
                    Ok(Err(e)) => Err(JobError { code: "encode_failed".into(), message: format!("{e:#}") }),
                    Err(e) => Err(JobError { code: "encode_failed".into(), message: e.to_string() }),
                },
                None => Err(JobError { code: "no_video".into(), message: "the pipeline produced no video".into() }),
            },
            Err(e) => Err(JobError { code: e.code().to_string(), message: e.to_string() }),
        };
        let result = match result {
            Ok(bytes) => self.keep_mp4(&id, bytes).await,
            Err(e) => Err(e),
        };
        let failed = {
            let mut g = self.inner.lock().unwrap();
            let Some(j) = g.jobs.get_mut(&id) else { return };
            j.video.completed_at = Some(now_secs());
            j.video.expires_at = self.expiry();
            let failed = match result {
                Ok((mp4, n)) => {
                    j.mp4 = Some(mp4);
                    j.mp4_bytes = n;
                    j.video.status = Status::Completed;
                    j.video.progress = 100;
                    if let Some(done) = j.held_done.take() {
                        Self::publish(j, done);
                    }
                    None
                }
                Err(e) => {
                    j.video.status = Status::Failed;
                    let already = j.history.iter().any(|e| matches!(e, OmniEvent::Error { .. }));
                    if !already {
                        let ev = OmniEvent::Error {
                            request_id: id.clone(),
                            code: e.code.clone(),
                            message: e.message.clone(),
                        };
                        Self::publish(j, ev);
                    }
                    j.video.error = Some(e);
                    (!j.deleted).then(|| (j.record(), j.history.clone()))
                }
            };
            // A completed job's events went to the store with its MP4 (the same ones: `done`
            // included); from now on subscribers read them there.
            if matches!(j.mp4, Some(Mp4::Stored(_))) {
                j.history_to_store();
            }
            let n = j.mp4_bytes;
            g.used_bytes += n;
            failed
        };
        if let (Some(store), Some((rec, history))) = (self.store.clone(), failed) {
            match tokio::task::spawn_blocking(move || store.put(&rec, Some(&history))).await {
                Ok(Ok(())) => {
                    self.with(&id, Job::history_to_store);
                }
                Ok(Err(e)) => tracing::warn!(id, "storing a failed job: {e:#}"),
                Err(e) => tracing::warn!(id, "storing a failed job: {e}"),
            }
        }
        if self.with(&id, |j| j.deleted) == Some(true) {
            self.forget(&id);
        }
    }

    /// Keeps a finished MP4: in memory, or written to the store with the completed record and
    /// the events (`done` included) before anyone is told the job completed.
    async fn keep_mp4(&self, id: &str, bytes: Vec<u8>) -> Result<(Mp4, u64), JobError> {
        let n = bytes.len() as u64;
        let deleted = self.with(id, |j| j.deleted).unwrap_or(true);
        let Some(store) = self.store.clone().filter(|_| !deleted) else {
            return Ok((Mp4::Memory(Arc::new(bytes)), n));
        };
        let failed = |message: String| JobError { code: "storage_failed".into(), message };
        let (mut rec, history) = self
            .with(id, |j| {
                let mut rec = j.record();
                rec.video.status = Status::Completed;
                rec.video.progress = 100;
                rec.video.completed_at = Some(now_secs());
                rec.video.expires_at = self.expiry();
                let mut history = j.history.clone();
                history.extend(j.held_done.clone());
                (rec, history)
            })
            .ok_or_else(|| failed("the job vanished while it was being stored".into()))?;
        let path = store.mp4_path(id).map_err(|e| failed(format!("{e:#}")))?;
        match tokio::task::spawn_blocking(move || store.complete(&mut rec, &bytes, &history)).await {
            Ok(Ok(())) => Ok((Mp4::Stored(path), n)),
            Ok(Err(e)) => Err(failed(format!("storing the video: {e:#}"))),
            Err(e) => Err(failed(e.to_string())),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn video(id: &str) -> VideoObject {
        VideoObject {
            id: id.into(),
            object: "video",
            model: "m".into(),
            status: Status::Queued,
            progress: 0,
            created_at: 0,
            completed_at: None,
            expires_at: None,
            seconds: "2".into(),
            size: "64x64".into(),
            error: None,
            remixed_from_video_id: None,
            prompt: "p".into(),
            seed: None,
            num_frames: 17,
            predicted_seconds: 0.0,
        }
    }

    #[test]
    fn listing_pages_in_both_orders() {
        let jobs = Jobs::default();
        for i in 0..5 {
            jobs.insert(video(&format!("v{i}")), Caller::default(), None, None).unwrap();
        }
        let ids = |v: Vec<VideoObject>| v.into_iter().map(|v| v.id).collect::<Vec<_>>();
        let (page, more) = jobs.list(None, 2, false, Caller::default()).unwrap();
        assert_eq!((ids(page), more), (vec!["v0".to_string(), "v1".into()], true));
        let (page, more) = jobs.list(Some("v3"), 2, false, Caller::default()).unwrap();
        assert_eq!((ids(page), more), (vec!["v4".to_string()], false));
        let (page, _) = jobs.list(None, 2, true, Caller::default()).unwrap();
        assert_eq!(ids(page), ["v4", "v3"]);
        assert!(jobs.list(Some("nope"), 2, false, Caller::default()).is_none());
    }

    #[test]
    fn a_job_is_seen_only_by_the_key_that_made_it() {
        let jobs = Jobs::default();
        let (a, b) = (Caller(Some(0)), Caller(Some(1)));
        jobs.insert(video("va"), a, None, None).unwrap();
        jobs.insert(video("vb"), b, None, None).unwrap();
        assert!(jobs.get("va", a).is_some() && jobs.get("va", b).is_none());
        assert!(jobs.content("va", b).is_none() && jobs.subscribe("va", b).is_none());
        let (page, _) = jobs.list(None, 10, false, b).unwrap();
        assert_eq!(page.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["vb"]);
        assert!(jobs.remove("va", b).is_none());
        assert!(jobs.get("va", a).is_some());
    }

    #[test]
    fn expired_jobs_vanish_and_the_sweeper_deletes_them_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let retention = Retention { ttl: Some(Duration::from_secs(60)), disk_budget: None };
        let jobs = Jobs::durable(Some(Store::open(dir.path()).unwrap()), retention);
        let who = Caller::default();
        jobs.insert(video("video_old"), who, None, None).unwrap();
        jobs.insert(video("video_new"), who, None, None).unwrap();
        for (id, expires) in [("video_old", now_secs() - 1), ("video_new", now_secs() + 60)] {
            jobs.with(id, |j| {
                j.video.status = Status::Completed;
                j.video.expires_at = Some(expires);
            });
        }
        assert!(jobs.get("video_old", who).is_none(), "expired: gone before the sweep");
        assert_eq!(jobs.sweep(), 1);
        assert_eq!(jobs.inner.lock().unwrap().jobs.len(), 1);
        let left = jobs.store.as_ref().unwrap().load().unwrap().records;
        assert_eq!(left.iter().map(|r| r.video.id.as_str()).collect::<Vec<_>>(), ["video_new"]);
        assert_eq!(jobs.sweep_interval(), Some(Duration::from_secs(6)));
    }

    #[test]
    fn a_full_disk_budget_refuses_new_jobs_with_507() {
        let jobs = Jobs::durable(None, Retention { ttl: None, disk_budget: Some(1 << 20) });
        assert!(jobs.check_space().is_ok());
        jobs.inner.lock().unwrap().used_bytes = 1 << 20;
        let e = jobs.check_space().unwrap_err();
        assert_eq!(e.body()["error"]["code"], "insufficient_storage");
        assert!(matches!(e, ApiError::InsufficientStorage { .. }));
        assert!(e.body()["error"]["message"].as_str().unwrap().contains("1.0 MiB of the 1.0 MiB"), "{}", e.body());
        assert!(Jobs::default().check_space().is_ok(), "no budget, no limit");
        assert_eq!((human_bytes(512), human_bytes(3 << 29)), ("512 bytes".into(), "1.5 GiB".to_string()));
    }
}
