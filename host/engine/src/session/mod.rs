//! Live world-model sessions in the engine. A session is an open-ended request (`task: world`)
//! run by a [`fastvideo_pipeline::PipelineRun`] over the session model's pipeline: the executor
//! runs its units (a denoise step or a commit pass of the current chunk) between the units of
//! ordinary jobs, with a deadline per chunk so the session keeps its frame rate while jobs run.
//!
//! The model side is behind [`SessionModel`] (defined in `fastvideo_pipeline`, implemented by
//! the world model), so the engine stays model-agnostic. Their pacing is the scheduler's
//! ([`crate::scheduler::Deadlines`], [`crate::scheduler::Pacer`]): one `State` decides between
//! a job's unit and a session's; `live` is the executor's side (runs, inboxes, streams).

mod info;
mod live;

pub use fastvideo_pipeline::session::{ActionInbox, SessionModel, SessionRequest};
pub use info::{ChunkHold, SessionChunk, SessionEvent, SessionInfo};
pub(crate) use live::{LiveSessions, SessionCommand, SessionShared};
pub use live::{STREAM_BUFFER_CHUNKS, STREAM_BUFFER_EVENTS};
