//! The engine's session façade: opening, acting on and closing live world-model sessions. The
//! checks happen here; the sessions themselves run on the executor (`crate::session`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fastvideo_request::{ActionPart, RequestError};
use tokio::sync::{mpsc, oneshot};

use super::command::Command;
use super::front::Engine;
use crate::session::{
    SessionCommand, SessionEvent, SessionInfo, SessionModel, SessionRequest, STREAM_BUFFER_CHUNKS, STREAM_BUFFER_EVENTS,
};
use crate::EngineError;

impl Engine {
    /// The session model, if this engine serves one.
    pub fn session_model(&self) -> Option<&Arc<dyn SessionModel>> {
        self.0.sessions.as_ref()
    }

    /// Opens a live session; its chunks arrive on the receiver (dropping it closes the session).
    /// The session is a `task: world` request checked like a job (plugin parameters against the
    /// deploy, exact mode), then run on the executor.
    pub async fn open_session(
        &self,
        id: String,
        req: SessionRequest,
    ) -> Result<mpsc::Receiver<SessionEvent>, EngineError> {
        let inner = &self.0;
        let Some(model) = &inner.sessions else { return Err(EngineError::NoSessions) };
        if inner.shared.draining.load(Ordering::SeqCst) {
            return Err(EngineError::Draining);
        }
        let live = inner.session_shared.info.lock().unwrap().len();
        if live >= inner.cfg.max_sessions {
            return Err(EngineError::SessionsFull { max: inner.cfg.max_sessions });
        }
        let request = model.request(&id, &req)?;
        (inner.models[0].check)(&request)?;
        // Adapters are read and prepared off the executor (and off this task's thread).
        let adapters = match (request.lora.is_empty(), model.adapters()) {
            (true, _) => None,
            (false, None) => {
                return Err(RequestError::new("lora", "this server enables no LoRA adapters for sessions").into())
            }
            (false, Some(cache)) => {
                cache.check(&request.lora)?;
                let (cache, lora) = (Arc::clone(cache), request.lora.clone());
                tokio::task::spawn_blocking(move || cache.set_for(&lora))
                    .await
                    .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?
                    .map_err(|e| EngineError::Failed {
                        code: "adapter_load_failed".into(),
                        message: format!("{e:#}"),
                    })?
            }
        };
        let (etx, erx) = mpsc::channel(STREAM_BUFFER_CHUNKS + STREAM_BUFFER_EVENTS);
        let (rtx, rrx) = oneshot::channel();
        let cmd = SessionCommand::Open { request: Box::new(request), adapters, events: etx, reply: rtx };
        inner.tx.lock().unwrap().send(Command::Session(cmd)).map_err(|_| EngineError::Stopped)?;
        rrx.await.unwrap_or(Err(EngineError::Stopped))?;
        Ok(erx)
    }

    /// Where a session stands, or `None` when it is not live.
    pub fn session_info(&self, id: &str) -> Option<SessionInfo> {
        self.0.session_shared.info.lock().unwrap().get(id).cloned()
    }

    /// Gives a session an action (from its `from_frame`, or the first chunk not yet committed).
    /// It is checked against the model here, so a bad one is refused before anything runs.
    pub fn session_action(&self, id: &str, action: &ActionPart) -> Result<(), EngineError> {
        let model = self.0.sessions.as_ref().ok_or(EngineError::NoSessions)?;
        if self.session_info(id).is_none() {
            return Err(EngineError::NoSession(id.to_string()));
        }
        action.check(&model.actions(), model.continuous_actions())?;
        let cmd = SessionCommand::Action { id: id.to_string(), action: action.clone() };
        self.0.tx.lock().unwrap().send(Command::Session(cmd)).map_err(|_| EngineError::Stopped)
    }

    /// Closes a session (its slabs are returned at once); `false` when it was not live.
    pub fn close_session(&self, id: &str, reason: &str) -> bool {
        // Gone for callers at once; the executor drops its state at its next command.
        let live = self.0.session_shared.info.lock().unwrap().remove(id).is_some();
        let cmd = SessionCommand::Close { id: id.to_string(), reason: reason.to_string() };
        let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
        live
    }

    /// Tells the executor whether a client is streaming the session (a streamed session never
    /// expires for idleness).
    pub fn session_streaming(&self, id: &str, on: bool) {
        let cmd = SessionCommand::Streaming { id: id.to_string(), on };
        let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
    }

    /// Tells the executor a client dropped `frames` of the session's frames unshown (stale after
    /// an action), so its schedule makes up for them.
    pub fn session_frames_skipped(&self, id: &str, frames: u64) {
        if frames > 0 {
            let cmd = SessionCommand::Skipped { id: id.to_string(), frames };
            let _ = self.0.tx.lock().unwrap().send(Command::Session(cmd));
        }
    }
}
