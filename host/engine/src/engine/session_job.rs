//! A world-model session run as a job: one session driven to a fixed number of chunks under a
//! list of actions, its events turned into a job's and its whole clip the job's output. Front
//! ends follow the [`Handle`] it answers exactly as they follow a submitted request, so a causal
//! video job takes the one job path (record, history, store, webhook) with no driver of its own.

use std::time::Instant;

use fastvideo_request::{ActionPart, Artifact, OmniEvent, OmniOutput, RequestMetrics, VideoArtifact};
use tokio::sync::{mpsc, oneshot};

use super::admission::Handle;
use super::front::Engine;
use crate::session::{SessionEvent, SessionRequest};
use crate::EngineError;

/// The node name a session job's progress events carry.
const SESSION_JOB_NODE: &str = "world";

impl Engine {
    /// Opens a session `id` with `req`, queues `actions` (each at its chunk's first frame, as
    /// [`ActionPart::from_frame`] says) and drives it to `actions.len() + 1` chunks, then
    /// closes it. The handle's events are a job's: `node_started`, then per chunk a `chunk`
    /// (its frames) and a `progress`, the session's plugin events, and `done`; its output is
    /// the whole clip. A refused request or action comes back here, before anything is kept.
    pub async fn submit_session_job(
        &self,
        id: String,
        req: SessionRequest,
        actions: &[ActionPart],
        predicted_seconds: f64,
    ) -> Result<Handle, EngineError> {
        let model = self.session_model().ok_or(EngineError::NoSessions)?;
        let request = model.request(&id, &req)?;
        let rx = self.open_session(id.clone(), req).await?;
        self.session_streaming(&id, true);
        for part in actions {
            if let Err(e) = self.session_action(&id, part) {
                self.close_session(&id, "its job was refused");
                return Err(e);
            }
        }
        let (etx, erx) = mpsc::unbounded_channel();
        let (otx, orx) = oneshot::channel();
        tokio::spawn(drive(self.clone(), id.clone(), rx, actions.len() + 1, etx, otx));
        Ok(Handle { request_id: id, request, predicted_seconds, events: erx, output: orx })
    }
}

/// Appends `piece`'s frames to `all`.
fn append(all: &mut Option<VideoArtifact>, piece: &VideoArtifact) {
    match all {
        None => *all = Some(piece.clone()),
        Some(v) => {
            v.rgb.extend_from_slice(&piece.rgb);
            v.num_frames += piece.num_frames;
        }
    }
}

/// Reads the session's stream to `chunks` chunks: each chunk and its progress as the job's
/// events, the whole clip as its output.
async fn drive(
    engine: Engine,
    id: String,
    mut rx: mpsc::Receiver<SessionEvent>,
    chunks: usize,
    events: mpsc::UnboundedSender<OmniEvent>,
    done: oneshot::Sender<Result<OmniOutput, EngineError>>,
) {
    let node = SESSION_JOB_NODE.to_string();
    let _ = events.send(OmniEvent::NodeStarted { request_id: id.clone(), node: node.clone() });
    let started = Instant::now();
    let (mut all, mut got) = (None, 0usize);
    let result = loop {
        match rx.recv().await {
            Some(SessionEvent::Chunk(c)) => {
                // A chunk the session dropped (its reader too slow) would leave a gap.
                if c.index != got as u64 {
                    break Err(format!("chunk {got} was dropped by the session (chunk {} came)", c.index));
                }
                append(&mut all, &c.video);
                got += 1;
                let (index, first_frame, action_id, video) = (c.index, c.first_frame, c.action_id, c.video.clone());
                // The session's hold on its buffer goes now: the job keeps its own copy.
                drop(c);
                let _ = events.send(OmniEvent::Chunk { request_id: id.clone(), index, first_frame, action_id, video });
                let (step, total_steps) = (got as u32, chunks as u32);
                let _ =
                    events.send(OmniEvent::Progress { request_id: id.clone(), node: node.clone(), step, total_steps });
                if got == chunks {
                    engine.close_session(&id, "the job has all its chunks");
                    break Ok(());
                }
            }
            Some(SessionEvent::Plugin(e)) => {
                let _ = events.send(e);
            }
            Some(SessionEvent::Closed { reason }) => {
                break Err(format!("the session ended after {got} chunks: {reason}"))
            }
            None => break Err(format!("the session ended after {got} chunks")),
        }
    };
    let outcome = match (result, all) {
        (Ok(()), Some(video)) => {
            let metrics = RequestMetrics {
                steps: chunks as u32,
                total_seconds: started.elapsed().as_secs_f64(),
                ..Default::default()
            };
            let _ = events.send(OmniEvent::Done { request_id: id.clone(), metrics: metrics.clone() });
            let artifacts = [("video".to_string(), Artifact::Video(video))].into_iter().collect();
            Ok(OmniOutput { request_id: id, artifacts, metrics, rewards: Default::default(), extended_prompt: None })
        }
        (Ok(()), None) => Err(EngineError::Failed { code: "no_video".into(), message: "no chunk came".into() }),
        (Err(message), _) => {
            engine.close_session(&id, "its job failed");
            Err(EngineError::Failed { code: "session_failed".into(), message })
        }
    };
    // Followers read the events to their end, then the output.
    drop(events);
    let _ = done.send(outcome);
}
