//! The server's record of every video job: status and progress for polling, the MP4 once done,
//! and the job's event history plus a live broadcast for SSE and WebSocket subscribers (who may
//! join late: they get the history first). With a [`Store`], every job is also on disk: created,
//! finished and deleted jobs are committed before the client hears of it, so a restart (even
//! after SIGKILL) finds them; without one they live in memory only.
//!
//! The registry is here; one job's entry (`entry`), following a job's engine handle to its end
//! (`follow`), reading the store back after a restart (`restore`) and announcing a job's end to
//! its webhook (`webhook`) each have their own file.

mod entry;
mod follow;
mod restore;
mod webhook;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastvideo_request::{OmniEvent, OmniRequest};
use tokio::sync::broadcast;

use self::entry::Job;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::job::{now_secs, VideoObject};
use crate::store::Store;

pub use entry::Mp4;
pub use restore::Restored;

/// How long finished jobs are kept, and how much their MP4s may take.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention {
    /// A finished job expires this long after it ended (`expires_at`); `None`: never.
    pub ttl: Option<Duration>,
    /// New jobs get HTTP 507 while stored MP4s take this many bytes or more.
    pub disk_budget: Option<u64>,
}

#[derive(Default)]
struct Inner {
    jobs: BTreeMap<String, Job>,
    next_seq: u64,
    /// Bytes of the MP4s held (in memory or on disk), for the disk budget.
    used_bytes: u64,
}

/// All jobs of this server process.
#[derive(Clone, Default)]
pub struct Jobs {
    inner: Arc<Mutex<Inner>>,
    store: Option<Arc<Store>>,
    retention: Retention,
    webhooks: Option<Arc<crate::webhooks::Webhooks>>,
    /// Causal jobs' fragmented-MP4 streams, dropped with their job.
    pub(crate) live: Arc<crate::live_streams::LiveStreams>,
}

/// A subscription: what happened so far, then what happens next. `None` receiver when the job
/// already ended.
pub type Subscription = (Vec<OmniEvent>, Option<broadcast::Receiver<OmniEvent>>);

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
        Self { inner: Arc::default(), store: store.map(Arc::new), retention, webhooks: None, live: Arc::default() }
    }

    /// Announces each job's end to its `webhook` URL.
    pub fn with_webhooks(mut self, webhooks: crate::webhooks::Webhooks) -> Self {
        self.webhooks = Some(Arc::new(webhooks));
        self
    }

    /// The URL a request's `webhook` field names, checked against the allowlist (a 400 naming
    /// `webhook` when refused, or when this server delivers none).
    pub fn check_webhook(&self, url: &str) -> Result<crate::webhooks::WebhookStatus, ApiError> {
        let Some(w) = &self.webhooks else {
            return Err(ApiError::field(
                "webhook",
                "webhook: this server delivers no webhooks (its operator sets --webhook-allow)",
            ));
        };
        let url = w.policy.check(url).map_err(|e| ApiError::field("webhook", e))?;
        Ok(crate::webhooks::WebhookStatus::pending(url.to_string()))
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
        self.live.forget(id);
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

    fn expiry(&self) -> Option<u64> {
        self.retention.ttl.map(|t| now_secs().saturating_add(t.as_secs().max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tests::video;
    use crate::job::Status;

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
