//! Following a job's engine handle to its end: progress into the record, events to subscribers,
//! and the finished MP4 kept (in memory, or in the store before anyone hears the job completed).

use std::sync::Arc;

use fastvideo_engine::{EngineError, Handle};
use fastvideo_request::OmniEvent;

use super::entry::{Job, Mp4};
use super::Jobs;
use crate::job::{now_secs, JobError, Status};

impl Jobs {
    fn publish(job: &mut Job, ev: OmniEvent) {
        job.history.push(ev.clone());
        let _ = job.tx.send(ev);
    }

    /// Follows an engine handle to the end, keeping the record current. Runs as its own task.
    pub async fn follow(
        self,
        mut handle: Handle,
        encode: fn(
            &fastvideo_request::VideoArtifact,
            Option<&fastvideo_request::AudioArtifact>,
        ) -> anyhow::Result<Vec<u8>>,
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
                } else if matches!(ev, OmniEvent::Preview { .. }) {
                    // Live only: previews are for watching, not for the stored history.
                    let _ = j.tx.send(ev.clone());
                } else {
                    Self::publish(j, ev.clone());
                }
            });
        }
        let result = handle.output.await.unwrap_or(Err(EngineError::Stopped));
        if let Ok(out) = &result {
            // Recorded before the MP4 is kept, so the stored record has it too.
            let extended = out.extended_prompt.clone();
            let action = out.actions().filter(|a| a.shape.len() == 2).map(|a| {
                let width = a.shape[1].max(1) as usize;
                a.data.chunks(width).map(<[f32]>::to_vec).collect()
            });
            self.with(&id, |j| {
                j.video.extended_prompt = extended;
                j.video.action = action;
            });
        }
        let result = match result {
            Ok(out) => match out.video().cloned() {
                Some(video) => match tokio::task::spawn_blocking(move || encode(&video, out.audio())).await {
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
            return;
        }
        self.deliver(id).await;
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
