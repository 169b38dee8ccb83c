//! Reading the store back after a restart: finished jobs return as they were, unfinished ones
//! run again or are failed.

use fastvideo_engine::Engine;
use fastvideo_request::OmniEvent;

use super::entry::{Job, Mp4};
use super::Jobs;
use crate::auth::ApiKeys;
use crate::job::{now_secs, JobError, Status};
use crate::webhooks::DeliveryState;

/// What a restart found in the store.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Finished jobs found, kept as they were.
    pub finished: usize,
    /// Unfinished jobs queued again from their stored request.
    pub requeued: usize,
    /// Unfinished jobs marked failed (`server_restarted`).
    pub failed: usize,
    /// Completed jobs whose MP4 had gone (`artifact_lost`).
    pub lost: usize,
    /// Ended jobs whose webhook was still to be delivered, now retried.
    pub webhooks: usize,
}

impl Jobs {
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
            let id = job.video.id.clone();
            let pending_webhook =
                job.video.ended() && job.video.webhook.as_ref().is_some_and(|w| w.status == DeliveryState::Pending);
            let mut g = self.inner.lock().unwrap();
            g.next_seq = g.next_seq.max(job.seq + 1);
            g.used_bytes += job.mp4_bytes;
            g.jobs.insert(job.video.id.clone(), job);
            drop(g);
            if let Some(h) = handle {
                tokio::spawn(self.clone().follow(h, fastvideo_media::mp4_bytes_with_audio));
            } else if pending_webhook {
                out.webhooks += 1;
                tokio::spawn(self.clone().deliver(id));
            }
        }
        self.sweep();
        Ok(out)
    }
}
