//! The server's record of every video job: status and progress for polling, the MP4 once done,
//! and the job's event history plus a live broadcast for SSE and WebSocket subscribers (who may
//! join late: they get the history first).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use fastvideo_engine::{EngineError, Handle};
use fastvideo_request::OmniEvent;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::auth::Caller;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

/// OpenAI's `Video` object plus our request echo.
#[derive(Debug, Clone, Serialize)]
pub struct VideoObject {
    pub id: String,
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

struct Job {
    video: VideoObject,
    /// Creation order, for listing.
    seq: u64,
    mp4: Option<Arc<Vec<u8>>>,
    history: Vec<OmniEvent>,
    /// The engine's `Done`, held back until the MP4 is stored so a client that sees `done`
    /// can fetch the content at once.
    held_done: Option<OmniEvent>,
    tx: broadcast::Sender<OmniEvent>,
    /// Deleted while still running: invisible to clients, kept until its follower ends so
    /// current subscribers still see the final `error` event.
    deleted: bool,
    /// The API key that created it: the only one that sees it.
    owner: Caller,
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[derive(Default)]
struct Inner {
    jobs: BTreeMap<String, Job>,
    next_seq: u64,
}

impl Job {
    fn visible_to(&self, who: Caller) -> bool {
        !self.deleted && self.owner == who
    }
}

/// All jobs of this server process (kept in memory; a restart forgets them).
#[derive(Clone, Default)]
pub struct Jobs(Arc<Mutex<Inner>>);

/// A subscription: what happened so far, then what happens next. `None` receiver when the job
/// already ended.
pub type Subscription = (Vec<OmniEvent>, Option<broadcast::Receiver<OmniEvent>>);

impl Jobs {
    pub fn insert(&self, video: VideoObject, owner: Caller) {
        let mut g = self.0.lock().unwrap();
        let seq = g.next_seq;
        g.next_seq += 1;
        let (tx, _) = broadcast::channel(1024);
        let id = video.id.clone();
        let job = Job { video, seq, mp4: None, history: Vec::new(), held_done: None, tx, deleted: false, owner };
        g.jobs.insert(id, job);
    }

    pub fn get(&self, id: &str, who: Caller) -> Option<VideoObject> {
        self.0.lock().unwrap().jobs.get(id).filter(|j| j.visible_to(who)).map(|j| j.video.clone())
    }

    pub fn content(&self, id: &str, who: Caller) -> Option<(VideoObject, Option<Arc<Vec<u8>>>)> {
        self.0.lock().unwrap().jobs.get(id).filter(|j| j.visible_to(who)).map(|j| (j.video.clone(), j.mp4.clone()))
    }

    /// Forgets a job: at once if it ended, else when its follower ends.
    pub fn remove(&self, id: &str, who: Caller) -> Option<VideoObject> {
        let mut g = self.0.lock().unwrap();
        let j = g.jobs.get_mut(id).filter(|j| j.visible_to(who))?;
        if matches!(j.video.status, Status::Completed | Status::Failed) {
            return g.jobs.remove(id).map(|j| j.video);
        }
        j.deleted = true;
        Some(j.video.clone())
    }

    /// Jobs in creation order (`desc`: newest first), starting after `after`, at most `limit`.
    /// Returns the page and whether more follow.
    pub fn list(&self, after: Option<&str>, limit: usize, desc: bool, who: Caller) -> Option<(Vec<VideoObject>, bool)> {
        let g = self.0.lock().unwrap();
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
        let g = self.0.lock().unwrap();
        g.jobs.values().filter(|j| !matches!(j.video.status, Status::Completed | Status::Failed)).count()
    }

    pub fn subscribe(&self, id: &str, who: Caller) -> Option<Subscription> {
        let g = self.0.lock().unwrap();
        let j = g.jobs.get(id).filter(|j| j.visible_to(who))?;
        let ended = matches!(j.video.status, Status::Completed | Status::Failed);
        Some((j.history.clone(), (!ended).then(|| j.tx.subscribe())))
    }

    fn with<R>(&self, id: &str, f: impl FnOnce(&mut Job) -> R) -> Option<R> {
        self.0.lock().unwrap().jobs.get_mut(id).map(f)
    }

    fn publish(job: &mut Job, ev: OmniEvent) {
        job.history.push(ev.clone());
        let _ = job.tx.send(ev);
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
        self.with(&id, |j| match result {
            Ok(bytes) => {
                j.mp4 = Some(Arc::new(bytes));
                j.video.status = Status::Completed;
                j.video.progress = 100;
                j.video.completed_at = Some(now_secs());
                if let Some(done) = j.held_done.take() {
                    Self::publish(j, done);
                }
            }
            Err(e) => {
                j.video.status = Status::Failed;
                let already = j.history.iter().any(|e| matches!(e, OmniEvent::Error { .. }));
                if !already {
                    let ev =
                        OmniEvent::Error { request_id: id.clone(), code: e.code.clone(), message: e.message.clone() };
                    Self::publish(j, ev);
                }
                j.video.error = Some(e);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn video(id: &str) -> VideoObject {
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
            jobs.insert(video(&format!("v{i}")), Caller::default());
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
        jobs.insert(video("va"), a);
        jobs.insert(video("vb"), b);
        assert!(jobs.get("va", a).is_some() && jobs.get("va", b).is_none());
        assert!(jobs.content("va", b).is_none() && jobs.subscribe("va", b).is_none());
        let (page, _) = jobs.list(None, 10, false, b).unwrap();
        assert_eq!(page.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(), ["vb"]);
        assert!(jobs.remove("va", b).is_none());
        assert!(jobs.get("va", a).is_some());
    }
}
